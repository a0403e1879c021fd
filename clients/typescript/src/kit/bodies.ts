/**
 * The whole provider body from a derived request, also when the service answered a DELTA (the
 * Python kit's `bodies`): the held prefix is always the whole previous request, so the whole
 * body is the previous body's items followed by the new ones; the other keys (`tools`,
 * `system`) come from the new response.
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

  get prefix(): HeldPrefix {
    return create(HeldPrefixSchema, { messageCount: this.totalMessages, digest: this.digest });
  }

  static of(request: DerivedRequest, held: HeldRequest | undefined): HeldRequest {
    const key = ITEMS_KEY[request.wireFormat];
    if (key === undefined) {
      throw new RangeError("wireFormat: the kit builds provider bodies, not NEUTRAL requests");
    }
    const body = JSON.parse(request.bodyJson) as Body;
    if (request.view === RequestView.DELTA) {
      if (held === undefined || request.firstMessageIndex !== held.totalMessages) {
        throw new RangeError("a DELTA response extends a request this session does not hold");
      }
      body[key] = [...(held.body[key] as unknown[]), ...(body[key] as unknown[])];
    }
    return new HeldRequest(body, request.totalMessages, request.digest);
  }
}
