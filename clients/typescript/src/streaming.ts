/**
 * Responses of any size (the Python client's `promptadmission.streaming`): StreamAdmit and
 * StreamReconcile send an `AdmitResponse` or `ReconcileResponse` encoded, in chunks of at most
 * 1 MiB, so a derived request far over gRPC's default 4 MiB message limit reaches the caller
 * through default limits and proxies.
 *
 * `admitStreamed(client, request)` and `reconcileStreamed(client, request)` take and return what
 * `client.admit` and `client.reconcile` do: the chunks are reassembled and checked against the
 * size the first one announces and the SHA-256 the last one carries (they ask for it there, so
 * the service hashes while it sends; `reassemble`), and a retryable failure is retried
 * with the same `requestId` (a fresh UUID4 one when the request has none), which replays the
 * stored response.
 */
import { createHash, randomUUID } from "node:crypto";

import { fromBinary } from "@bufbuild/protobuf";
import type { DescMessage, MessageInitShape, MessageShape } from "@bufbuild/protobuf";
import type { CallOptions } from "@connectrpc/connect";

import {
  AdmitResponseSchema,
  ReconcileResponseSchema,
} from "./gen/promptadmission/v1/admission_service_pb.js";
import type {
  AdmitRequestSchema,
  AdmitResponse,
  ReconcileRequestSchema,
  ReconcileResponse,
} from "./gen/promptadmission/v1/admission_service_pb.js";
import { DEFAULT_RETRIES, SESSION_HEADER, isRetryable } from "./index.js";
import type { AdmissionClient } from "./index.js";

/** A `StreamAdmitResponse` or `StreamReconcileResponse`. */
export interface ResponseChunk {
  data: Uint8Array;
  totalBytes: number | bigint;
  sha256: Uint8Array;
}

/**
 * The chunks do not make the response they announced (missing bytes, or bytes that are not the
 * ones whose SHA-256 a chunk carried). Not retried: repeat the call with the same
 * `requestId` to receive the stored response again.
 */
export class StreamedResponseError extends Error {
  override name = "StreamedResponseError";
}

/**
 * The response the chunks carry, checked against the size the first announces and the SHA-256
 * the first or, when the request set `sha256InLastChunk`, the last carries (exactly one chunk).
 */
export function reassemble<Desc extends DescMessage>(
  chunks: readonly ResponseChunk[],
  schema: Desc,
): MessageShape<Desc> {
  const first = chunks[0];
  if (first === undefined) {
    throw new StreamedResponseError("the stream ended before its first chunk");
  }
  const total = Number(first.totalBytes);
  const digests = chunks.filter((chunk) => chunk.sha256.length > 0);
  if (digests.length !== 1) {
    throw new StreamedResponseError(`${digests.length} chunks carried a SHA-256, not one`);
  }
  const size = chunks.reduce((sum, chunk) => sum + chunk.data.length, 0);
  if (size !== total) {
    throw new StreamedResponseError(`received ${size} of the ${total} bytes announced`);
  }
  const data = new Uint8Array(size);
  let offset = 0;
  const hash = createHash("sha256");
  for (const chunk of chunks) {
    data.set(chunk.data, offset);
    offset += chunk.data.length;
    hash.update(chunk.data);
  }
  if (!Buffer.from(hash.digest()).equals(Buffer.from(digests[0]!.sha256))) {
    throw new StreamedResponseError("the reassembled response does not match its SHA-256");
  }
  return fromBinary(schema, data);
}

/** Options of `admitStreamed` and `reconcileStreamed`: Connect's, and how often to retry. */
export interface StreamedCallOptions extends CallOptions {
  /** How many times a retryable failure is retried (default `DEFAULT_RETRIES`). */
  retries?: number;
}

/** Admit through StreamAdmit: the whole `AdmitResponse`, whatever its size. */
export function admitStreamed(
  client: AdmissionClient,
  request: MessageInitShape<typeof AdmitRequestSchema>,
  options: StreamedCallOptions = {},
): Promise<AdmitResponse> {
  const prepared = withRequestId(request);
  return streamed(
    options,
    prepared.sessionId,
    (callOptions) => client.streamAdmit({ request: prepared, sha256InLastChunk: true }, callOptions),
    (chunks) => reassemble(chunks, AdmitResponseSchema),
  );
}

/** Reconcile through StreamReconcile: the whole `ReconcileResponse`, whatever its size. */
export function reconcileStreamed(
  client: AdmissionClient,
  request: MessageInitShape<typeof ReconcileRequestSchema>,
  options: StreamedCallOptions = {},
): Promise<ReconcileResponse> {
  const prepared = withRequestId(request);
  return streamed(
    options,
    prepared.sessionId,
    (callOptions) =>
      client.streamReconcile({ request: prepared, sha256InLastChunk: true }, callOptions),
    (chunks) => reassemble(chunks, ReconcileResponseSchema),
  );
}

function withRequestId<R extends { requestId?: string; sessionId?: string }>(request: R): R {
  return request.requestId ? request : { ...request, requestId: randomUUID() };
}

async function streamed<Response>(
  options: StreamedCallOptions,
  sessionId: string | undefined,
  call: (options: CallOptions) => AsyncIterable<ResponseChunk>,
  assemble: (chunks: readonly ResponseChunk[]) => Response,
): Promise<Response> {
  const { retries = DEFAULT_RETRIES, ...callOptions } = options;
  // The client's own interceptors leave streams alone: the session hint is set here.
  const headers = new Headers(callOptions.headers);
  if (sessionId) {
    headers.set(SESSION_HEADER, sessionId);
  }
  for (let attempt = 0; ; attempt++) {
    try {
      const chunks: ResponseChunk[] = [];
      for await (const chunk of call({ ...callOptions, headers })) {
        chunks.push(chunk);
      }
      return assemble(chunks);
    } catch (err) {
      if (attempt >= retries || !isRetryable(err) || callOptions.signal?.aborted) {
        throw err;
      }
      const cap = Math.min(2_000, 100 * 2 ** attempt);
      await new Promise((resolve) => setTimeout(resolve, cap / 2 + Math.random() * (cap / 2)));
    }
  }
}
