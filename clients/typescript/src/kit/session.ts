/**
 * A harness's session through the service, one call per model call: the Python kit's
 * `HarnessSession` with the same semantics.
 *
 * - `admit({ prompt, users, tools, config })` returns the provider body to post, whole
 *   (`client.messages.create({ model, max_tokens, ...body })`), although the kit asks for DELTA
 *   views and receives only the new messages, in every provider format (`HeldRequest`: an
 *   Anthropic Messages DELTA may re-send the held turn it changed);
 * - `observe(response)` converts the provider's response (`modelOutput`) and keeps it, with the
 *   tool results added by `toolResult(call, value)`, as the next Admit's `previousOutput`;
 * - turn and step numbers: a step after a response that made tool calls is the next step of the
 *   turn, a step after a response that made none starts the next turn;
 * - retries: a call that failed is repeated with the same `requestId`, and the output it carried
 *   stays pending until a call succeeds;
 * - responses of any size: an Admit or Reconcile whose response is too large for one message
 *   (`RESPONSE_TOO_LARGE`: a FULL body, the first or after a compaction, and a step's new tool
 *   outputs may be large) is made again as StreamAdmit / StreamReconcile (`admitStreamed`,
 *   `reconcileStreamed`), the same request and `requestId` (the refused call committed nothing);
 * - `close()` records the pending output of the turn's last step (`Record`).
 */
import { randomUUID } from "node:crypto";

import { create } from "@bufbuild/protobuf";

import type { AdmissionClient } from "../index.js";
import { Reason, errorReason } from "../index.js";
import { admitStreamed, reconcileStreamed } from "../streaming.js";
import {
  AdmitRequestSchema,
  StepOutputSchema,
} from "../gen/promptadmission/v1/admission_service_pb.js";
import type {
  AdmitRequest,
  AdmitResponse,
  CompactResponse,
  PlanCompactionResponse,
  ReconcileResponse,
  RecordResponse,
  StepOutput,
} from "../gen/promptadmission/v1/admission_service_pb.js";
import {
  MessageRole,
  MessageSchema,
  RequestView,
  RouteSchema,
  ToolSchema,
  WireFormat,
} from "../gen/promptadmission/v1/session_pb.js";
import type { Message, Route, Tool, ToolCallBlock, ToolResult } from "../gen/promptadmission/v1/session_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { HeldRequest } from "./bodies.js";
import type { Body } from "./bodies.js";
import { modelOutput } from "./modelOutput.js";
import type { ModelOutput } from "./outputs.js";
import { toolResult } from "./toolResults.js";

type RouteInit = Route | MessageInitShape<typeof RouteSchema>;

/** A tool for `admit`: its parameter schema written once, in a stable serialization. */
export function tool(name: string, description = "", parameters?: Record<string, unknown>): Tool {
  const parametersJson = parameters === undefined ? "" : JSON.stringify(parameters);
  return create(ToolSchema, { name, description, parametersJson });
}

export interface AdmitOptions {
  /** The complete system prompt the harness rendered for this step. */
  prompt: string;
  /** The step's user messages: text, or `Message`s. */
  users?: (string | Message)[];
  /** The tool set visible to the model. */
  tools?: Tool[];
  /** The step's sampling configuration; a value that is not a string is written as JSON. */
  config?: Record<string, unknown>;
  /** The harness decided this request starts a new request series. */
  startsSeries?: boolean;
}

export interface SessionOptions {
  route: RouteInit;
  wireFormat: WireFormat;
  /** The turn to count from (resuming a session). */
  turn?: number;
  /** The first Admit declares a resume (a harness restarted on an existing session). */
  resume?: boolean;
}

/** One session of a harness on one route and wire format (see the module's comment). */
export class HarnessSession<B = Body> {
  /** The latest Admit's or Reconcile's response. */
  last: AdmitResponse | ReconcileResponse | undefined;
  private route: Route;
  private readonly wireFormat: WireFormat;
  private turnNumber: number;
  private stepNumber = 0;
  private resume: boolean;
  private admissionId = "";
  private held: HeldRequest | undefined;
  private output: ModelOutput | undefined;
  private results: ToolResult[] = [];
  // The step's response made no tool calls: the model answered, the turn is over.
  private answered = false;
  private readonly requestIds = new Map<string, string>();

  constructor(
    readonly client: AdmissionClient,
    readonly sessionId: string,
    options: SessionOptions,
  ) {
    if (options.wireFormat === WireFormat.UNSPECIFIED || options.wireFormat === WireFormat.NEUTRAL) {
      throw new RangeError("wireFormat: the kit builds provider bodies; pick a provider format");
    }
    this.route = create(RouteSchema, options.route);
    this.wireFormat = options.wireFormat;
    this.turnNumber = options.turn ?? 1;
    this.resume = options.resume ?? false;
  }

  /** Creates a session (`sessionId` optional) and its harness session. */
  static async open<B = Body>(
    client: AdmissionClient,
    options: SessionOptions & { sessionId?: string },
  ): Promise<HarnessSession<B>> {
    const { session } = await client.createSession({ sessionId: options.sessionId ?? "" });
    return new HarnessSession<B>(client, session?.sessionId ?? "", options);
  }

  get turn(): number {
    return this.turnNumber;
  }

  get step(): number {
    return this.stepNumber;
  }

  /** Admits the next step, recording the pending output first; the body to post. */
  async admit(options: AdmitOptions): Promise<B> {
    const [turn, step] = this.answered ? [this.turnNumber + 1, 1] : [this.turnNumber, this.stepNumber + 1];
    const request: AdmitRequest = create(AdmitRequestSchema, {
      sessionId: this.sessionId,
      requestId: this.requestId("admit"),
      turn: BigInt(turn),
      step: BigInt(step),
      renderedPrompt: options.prompt,
      tools: options.tools ?? [],
      route: this.route,
      startsRequestSeries: options.startsSeries ?? false,
      users: (options.users ?? []).map((user) =>
        typeof user === "string"
          ? create(MessageSchema, { role: MessageRole.USER, content: [{ block: { case: "text", value: { text: user } } }] })
          : user,
      ),
      resume: this.resume,
      wireFormat: this.wireFormat,
      ...this.view(),
      config: Object.fromEntries(
        Object.entries(options.config ?? {}).map(([key, value]) => [
          key,
          typeof value === "string" ? value : JSON.stringify(value),
        ]),
      ),
      previousOutput: this.pendingOutput(),
    });
    const response = await this.client.admit(request).catch((err: unknown) => {
      if (errorReason(err) !== Reason.RESPONSE_TOO_LARGE) {
        throw err;
      }
      return admitStreamed(this.client, request);
    });
    this.succeeded("admit");
    this.last = response;
    [this.turnNumber, this.stepNumber] = [turn, step];
    this.resume = false;
    this.admissionId = response.admissionId;
    [this.output, this.results, this.answered] = [undefined, [], false];
    return this.derived(response);
  }

  /** Keeps the provider's response as this step's output; returns it converted. */
  observe(response: unknown): ModelOutput {
    this.output = modelOutput(response, this.route.provider);
    this.answered = this.output.toolCalls.length === 0;
    return this.output;
  }

  /** Adds a tool's result (`toolResults.toolResult`) to this step's output. */
  toolResult(call: ToolCallBlock | string, value: unknown, options: { isError?: boolean } = {}): ToolResult {
    const result = toolResult(call, value, options);
    this.results.push(result);
    return result;
  }

  /** The step again (`Reconcile`), for example on a fallback `route`; the body. */
  async retry(route?: RouteInit): Promise<B> {
    if (!this.admissionId) {
      throw new Error("retry: no step has been admitted yet");
    }
    if (route !== undefined) {
      this.route = create(RouteSchema, route);
    }
    const request = {
      sessionId: this.sessionId,
      requestId: this.requestId("reconcile"),
      admissionId: this.admissionId,
      route: this.route,
      wireFormat: this.wireFormat,
      ...this.view(),
    };
    const response = await this.client.reconcile(request).catch((err: unknown) => {
      if (errorReason(err) !== Reason.RESPONSE_TOO_LARGE) {
        throw err;
      }
      return reconcileStreamed(this.client, request);
    });
    this.succeeded("reconcile");
    this.last = response;
    return this.derived(response);
  }

  /** Records the pending output now (`close` does it for a turn's last step). */
  async record(): Promise<RecordResponse | undefined> {
    const output = this.pendingOutput();
    if (output === undefined) {
      return undefined;
    }
    const response = await this.client.record({
      sessionId: this.sessionId,
      requestId: this.requestId("record"),
      admissionId: output.admissionId,
      assistant: output.assistant,
      toolResults: output.toolResults,
      usage: output.usage,
    });
    this.succeeded("record");
    [this.output, this.results] = [undefined, []];
    return response;
  }

  /**
   * Records the pending output, plans a compaction keeping about `retainTokens` of the latest
   * history, asks `summarize` for the summary of the plan's `summarizationInput` and commits it.
   */
  async compact(
    summarize: (plan: PlanCompactionResponse) => Promise<string>,
    options: { retainTokens: number },
  ): Promise<CompactResponse> {
    await this.record();
    const plan = await this.client.planCompaction({
      sessionId: this.sessionId,
      selection: { case: "retainTokens", value: BigInt(options.retainTokens) },
    });
    const summary = await summarize(plan);
    const response = await this.client.compact({
      sessionId: this.sessionId,
      requestId: this.requestId("compact"),
      planToken: plan.planToken,
      summary,
    });
    this.succeeded("compact");
    return response;
  }

  async close(): Promise<void> {
    await this.record();
  }

  private requestId(kind: string): string {
    let id = this.requestIds.get(kind);
    if (id === undefined) {
      id = randomUUID();
      this.requestIds.set(kind, id);
    }
    return id;
  }

  private succeeded(kind: string): void {
    this.requestIds.delete(kind);
  }

  private view() {
    return this.held === undefined
      ? { view: RequestView.FULL }
      : { view: RequestView.DELTA, heldPrefix: this.held.prefix };
  }

  private pendingOutput(): StepOutput | undefined {
    if (this.output === undefined && this.results.length === 0) {
      return undefined;
    }
    return create(StepOutputSchema, {
      admissionId: this.admissionId,
      assistant: this.output?.assistant,
      toolResults: this.results,
      usage: this.output?.usage,
    });
  }

  private derived(response: AdmitResponse | ReconcileResponse): B {
    if (response.request === undefined) {
      throw new Error("the service answered without a derived request");
    }
    this.held = HeldRequest.of(response.request, this.held);
    return structuredClone(this.held.body) as B;
  }
}
