/**
 * The windowed prompt fold, for UIs that load a session's events in windows (ListEvents pages).
 *
 * `inspectSystemPrompt(previous, event)` folds one `Event` into the previous state (`undefined`
 * before the first) and returns the next; it is pure, and every state stays valid, so a
 * historical card keeps its own prefix state. The semantics are the service's (ListTrajectory,
 * Inspect) and the reference harness's `inspectSystemPrompt`:
 *
 * - only system messages and surface replacements change the state; any other event returns
 *   `previous` itself;
 * - the state keeps the surviving system nodes ordered by surface position: a replacement takes
 *   the position of its start endpoint, whatever its seq;
 * - `replacements` maps each surviving replacement's seq to that position; every replacement
 *   copies the map and drops the entries it shadows;
 * - an empty node stays addressable but never overrides a non-empty prompt;
 * - a replacement whose endpoint is older than the first loaded relevant event (and is not a
 *   known replacement) has an unknown position: the state becomes `uncertain` and shows no
 *   prompt until the earlier window is replayed (fold again from its first event);
 * - `update` is true for an appended system message that follows an earlier non-empty system
 *   node in the loaded window (without that node it is presented as an initial prompt).
 *
 * `tests/fixtures/prompt_fold/cases.json` holds the event windows and expected states that this
 * module, the Python client and the service all satisfy.
 */
import { timestampDate } from "@bufbuild/protobuf/wkt";

import { EventKind } from "./gen/promptadmission/v1/session_pb.js";
import type { Event } from "./gen/promptadmission/v1/session_pb.js";

/** A system node, or the effective prompt anchored at the event that established it. */
export interface PromptNode {
  readonly seq: number;
  readonly time: Date | undefined;
  readonly turn: number;
  readonly step: number;
  /** The prompt text; "" means no prompt. */
  readonly text: string;
  /** An appended node that follows an earlier non-empty loaded system node. */
  readonly update: boolean;
}

export interface PositionedNode {
  readonly position: number;
  readonly node: PromptNode;
}

/** The prompt facts at one prefix of the loaded window. */
export interface PromptFoldState {
  /** The first loaded relevant event; older endpoints without a known position are unknown. */
  readonly firstSeq: number;
  /** An endpoint of unknown order was met: no prompt until the earlier window is replayed. */
  readonly uncertain: boolean;
  /** Surviving loaded system nodes in surface order, empty ones included. */
  readonly nodes: readonly PositionedNode[];
  /** Surviving replacements' seqs mapped to the surface positions they inherited. */
  readonly replacements: ReadonlyMap<number, number>;
  /** The prompt in force; undefined while unknown. */
  readonly effective: PromptNode | undefined;
  /** The system node the last folded event introduced, if any. */
  readonly introduced: PromptNode | undefined;
}

const NO_REPLACEMENTS: ReadonlyMap<number, number> = new Map();

function replaceRange(event: Event): readonly [number, number] | undefined {
  const op = event.surfaceOp?.op;
  return op?.case === "replace" ? [Number(op.value.startSeq), Number(op.value.endSeq)] : undefined;
}

function lastNonEmpty(nodes: readonly PositionedNode[]): PromptNode | undefined {
  for (let index = nodes.length - 1; index >= 0; index--) {
    const node = nodes[index]!.node;
    if (node.text !== "") return node;
  }
  return undefined;
}

function systemText(event: Event): string {
  const message = event.body.case === "message" ? event.body.value : undefined;
  return (message?.content ?? [])
    .flatMap((block) => (block.block.case === "text" ? [block.block.value.text] : []))
    .join("");
}

/** Whether `event` can change the prompt: a system message or a surface replacement. */
export function isPromptRelevant(event: Event): boolean {
  return event.kind === EventKind.SYSTEM_MESSAGE || replaceRange(event) !== undefined;
}

/**
 * Fold one event into `previous`; an event that cannot change the prompt returns `previous`.
 */
export function inspectSystemPrompt(
  previous: PromptFoldState | undefined,
  event: Event,
): PromptFoldState | undefined {
  if (!isPromptRelevant(event)) return previous;
  const seq = Number(event.seq);
  const time = event.commitTime === undefined ? undefined : timestampDate(event.commitTime);
  const replaced = replaceRange(event);
  const firstSeq = previous?.firstSeq ?? seq;
  let nodes = previous?.nodes ?? [];
  let replacements = previous?.replacements ?? NO_REPLACEMENTS;
  const unknown = (endpoint: number): boolean => endpoint < firstSeq && !replacements.has(endpoint);
  const uncertain =
    previous?.uncertain === true ||
    (replaced !== undefined && (unknown(replaced[0]) || unknown(replaced[1])));
  if (uncertain) {
    return {
      firstSeq,
      uncertain,
      nodes: [],
      replacements: NO_REPLACEMENTS,
      effective: undefined,
      introduced: undefined,
    };
  }
  let position = seq;
  if (replaced !== undefined) {
    position = replacements.get(replaced[0]) ?? replaced[0];
    const end = replacements.get(replaced[1]) ?? replaced[1];
    nodes = nodes.filter((item) => item.position < position || item.position > end);
    const retained = new Map(
      [...replacements].filter(([, inherited]) => inherited < position || inherited > end),
    );
    retained.set(seq, position);
    replacements = retained;
  }
  const introduced: PromptNode | undefined =
    event.kind === EventKind.SYSTEM_MESSAGE
      ? {
          seq,
          time,
          turn: Number(event.turn),
          step: Number(event.step),
          text: systemText(event),
          update:
            event.surfaceOp?.op.case === "append" &&
            previous !== undefined &&
            previous.nodes.some((item) => item.node.text !== ""),
        }
      : undefined;
  if (introduced !== undefined) {
    nodes = [...nodes, { position, node: introduced }].sort((a, b) => a.position - b.position);
  }
  const surviving = lastNonEmpty(nodes);
  const before = previous === undefined ? undefined : lastNonEmpty(previous.nodes);
  const effective =
    surviving === before
      ? previous?.effective
      : introduced !== undefined && surviving === introduced
        ? introduced
        : {
            seq,
            time,
            turn: surviving?.turn ?? 0,
            step: surviving?.step ?? 0,
            text: surviving?.text ?? "",
            update: false,
          };
  return { firstSeq, uncertain: false, nodes, replacements, effective, introduced };
}

/** Fold a window of events (in seq order) into `state`. */
export function foldSystemPrompt(
  events: Iterable<Event>,
  state?: PromptFoldState,
): PromptFoldState | undefined {
  let current = state;
  for (const event of events) current = inspectSystemPrompt(current, event);
  return current;
}
