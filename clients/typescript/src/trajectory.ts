/**
 * Reading ListTrajectory by reference.
 *
 * Each entry names its system prompts and tool sets by version id (`PromptSnapshot.systemPromptId`,
 * `PromptSnapshot.toolSetId`, `TrajectoryEntry.effectivePromptId`) and each page carries each
 * distinct text and tool set once (`ListTrajectoryResponse.systemPrompts`, `toolSets`). A version
 * id is a hash of the content, so what one page carried stays valid for every later page:
 * `Trajectory` keeps each distinct content once, whatever the number of pages and entries naming it.
 *
 * `add(page)` keeps a page; `systemPrompt`, `tools` and `effectivePrompt` look contents up;
 * `resolved(entry)` is a copy of an entry with every text and tool set filled in (the entry as it
 * reads without references; it repeats the contents, so call it per entry). `allTrajectory(client,
 * sessionId)` reads every page.
 */
import { clone } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";

import { AdmissionService } from "./gen/promptadmission/v1/admission_service_pb.js";
import type { ListTrajectoryResponse } from "./gen/promptadmission/v1/admission_service_pb.js";
import type { Tool } from "./gen/promptadmission/v1/session_pb.js";
import { TrajectoryEntrySchema } from "./gen/promptadmission/v1/trajectory_pb.js";
import type {
  PromptChange,
  PromptSnapshot,
  TrajectoryEntry,
} from "./gen/promptadmission/v1/trajectory_pb.js";

const TRAJECTORY_PAGE_SIZE = 1000;

/** The entries of the pages added so far, in order, and each distinct content they name, once. */
export class Trajectory {
  readonly entries: TrajectoryEntry[] = [];
  readonly systemPrompts = new Map<string, string>();
  readonly toolSets = new Map<string, Tool[]>();

  /** Keep a page's entries and the contents it carries. */
  add(page: ListTrajectoryResponse): void {
    this.entries.push(...page.entries);
    for (const prompt of page.systemPrompts) {
      if (!this.systemPrompts.has(prompt.id)) this.systemPrompts.set(prompt.id, prompt.text);
    }
    for (const toolSet of page.toolSets) {
      if (!this.toolSets.has(toolSet.id)) this.toolSets.set(toolSet.id, toolSet.tools);
    }
  }

  /** The system prompt `snapshot` names ("" for none). */
  systemPrompt(snapshot: PromptSnapshot | undefined): string {
    return this.prompt(snapshot?.systemPromptId ?? "");
  }

  /** The tool set `snapshot` names ([] for none). */
  tools(snapshot: PromptSnapshot | undefined): Tool[] {
    const id = snapshot?.toolSetId ?? "";
    if (id === "") return [];
    const tools = this.toolSets.get(id);
    if (tools === undefined) throw new Error(`no page added carries tool set ${id}`);
    return tools;
  }

  /** The prompt the model saw for `entry` ("" for none). */
  effectivePrompt(entry: TrajectoryEntry): string {
    return this.prompt(entry.effectivePromptId);
  }

  /** A copy of `entry` with every prompt text and tool set filled in. */
  resolved(entry: TrajectoryEntry): TrajectoryEntry {
    const copy = clone(TrajectoryEntrySchema, entry);
    const facts = [...copy.headers, ...(copy.header ? [copy.header] : [])];
    const changes: PromptChange[] = [];
    for (const fact of facts) if (fact.change) changes.push(fact.change);
    if (copy.change) changes.push(copy.change);
    const snapshots = facts.map((fact) => fact.prompt);
    snapshots.push(...changes.map((change) => change.previous));
    for (const snapshot of snapshots) {
      if (snapshot === undefined) continue;
      if (snapshot.systemPromptId !== "") snapshot.systemPrompt = this.systemPrompt(snapshot);
      snapshot.tools.push(...this.tools(snapshot));
    }
    if (copy.effectivePrompt && entry.effectivePromptId !== "") {
      copy.effectivePrompt.text = this.effectivePrompt(entry);
    }
    return copy;
  }

  private prompt(id: string): string {
    if (id === "") return "";
    const text = this.systemPrompts.get(id);
    if (text === undefined) throw new Error(`no page added carries system prompt ${id}`);
    return text;
  }
}

/** The session's whole trajectory: every ListTrajectory page, each distinct content once. */
export async function allTrajectory(
  client: Client<typeof AdmissionService>,
  sessionId: string,
): Promise<Trajectory> {
  const trajectory = new Trajectory();
  let pageToken = "";
  do {
    const page = await client.listTrajectory({
      sessionId,
      pageSize: TRAJECTORY_PAGE_SIZE,
      pageToken,
    });
    trajectory.add(page);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  return trajectory;
}
