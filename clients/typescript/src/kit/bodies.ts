/**
 * The whole provider body from a derived request, also when the service answered a DELTA (the
 * Python kit's `bodies`): the held prefix is always the whole previous request, so the whole
 * body is the previous body's items without the last `replacedBodyItems` of them, followed by
 * the new ones. That count is 0 for the OpenAI formats (their items follow the held ones); an
 * Anthropic Messages DELTA re-sends the held turn new user content merged into (and the system
 * updates after it). The other keys (`tools`) come from the new response, except an Anthropic
 * `system` it leaves out, which is the held body's.
 */
import { create } from "@bufbuild/protobuf";

import { HeldPrefixSchema, RequestView, WireFormat } from "../gen/promptadmission/v1/session_pb.js";
import type { DerivedRequest, HeldPrefix } from "../gen/promptadmission/v1/session_pb.js";

/** A provider body's conversation fields (`messages`, `system`, `input`, `tools`). */
export type Body = Record<string, unknown>;

const ITEMS_KEY: Partial<Record<WireFormat, string>> = {
  [WireFormat.OPENAI_CHAT]: "messages",
  [WireFormat.OPENAI_RESPONSES]: "input",
  [WireFormat.ANTHROPIC_MESSAGES]: "messages",
};

/** The latest derived request in full: what a DELTA extends and the prefix it names. */
export class HeldRequest {
  private constructor(
    readonly body: Body,
    readonly totalMessages: bigint,
    readonly digest: Uint8Array,
  ) {}

  /** What the next DELTA request names: the messages held, and the length of the held body's
   * list (which an Anthropic Messages DELTA continues). */
  get prefix(): HeldPrefix {
    const items = (this.body["messages"] ?? this.body["input"]) as unknown[];
    return create(HeldPrefixSchema, {
      messageCount: this.totalMessages,
      digest: this.digest,
      bodyItems: BigInt(items.length),
    });
  }

  static of(request: DerivedRequest, held: HeldRequest | undefined): HeldRequest {
    const key = ITEMS_KEY[request.wireFormat];
    if (key === undefined) {
      throw new RangeError("wireFormat: the kit builds provider bodies, not NEUTRAL requests");
    }
    let body = JSON.parse(request.bodyJson) as Body;
    if (request.view === RequestView.DELTA) {
      if (held === undefined || request.firstMessageIndex !== held.totalMessages) {
        throw new RangeError("a DELTA response extends a request this session does not hold");
      }
      body = extended(held.body, body, key, request.replacedBodyItems);
    }
    return new HeldRequest(body, request.totalMessages, request.digest);
  }
}

/**
 * The whole body: the held list without its last `replaced` items, then the DELTA's; `system`
 * the DELTA's or else the held one; the DELTA's other keys (in the order the service renders a
 * FULL body: the list, `system`, the rest).
 */
function extended(held: Body, delta: Body, key: string, replaced: bigint): Body {
  const items = held[key] as unknown[];
  if (replaced < 0n || replaced > BigInt(items.length)) {
    throw new RangeError("a DELTA response replaces more items than the held body has");
  }
  const whole: Body = {
    [key]: [...items.slice(0, items.length - Number(replaced)), ...(delta[key] as unknown[])],
  };
  if ("system" in delta) {
    whole["system"] = delta["system"];
  } else if ("system" in held) {
    whole["system"] = held["system"];
  }
  for (const [name, value] of Object.entries(delta)) {
    if (!(name in whole)) {
      whole[name] = value;
    }
  }
  return whole;
}
