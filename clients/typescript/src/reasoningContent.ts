/**
 * DeepSeek's streamed `reasoning_content`, accumulated.
 *
 * DeepSeek's chat API streams the model's reasoning as `choices[i].delta.reasoning_content`
 * strings, and after tool calls it requires that reasoning back (`reasoning_content` on the
 * assistant message) in later requests. The `openai` Node SDK's `ChatCompletionStream` copies
 * fields its types do not declare onto the snapshot as they come, so `finalChatCompletion()`
 * keeps only the *last* `reasoning_content` delta (usually `null`, once the answer starts);
 * the Python SDK's accumulator concatenates them. `ReasoningContent` keeps the concatenation
 * per choice, from the same chunks, and puts it on the final completion:
 *
 * ```ts
 * const stream = openai.chat.completions.stream(params);
 * const completion = await finalChatCompletionWithReasoning(stream);
 * // completion.choices[0].message.reasoning_content: every delta, concatenated
 * ```
 *
 * It depends on no SDK: the shapes below are the parts of a chunk and a completion it reads.
 */

/**
 * The part of a streamed chat completion chunk the accumulator reads: each choice's `index` and
 * its `delta`, whose `reasoning_content` (a field the SDK's types do not declare) is read when it
 * is a string.
 */
export interface ReasoningChunk {
  readonly choices: ReadonlyArray<{ readonly index: number; readonly delta?: object | null }>;
}

/** A completion whose choices' messages can carry `reasoning_content`. */
export interface CompletionWithChoices {
  readonly choices: ReadonlyArray<{ readonly index: number; readonly message: object }>;
}

/** `T` with `reasoning_content` on each choice's message. */
export type WithReasoningContent<T extends CompletionWithChoices> = Omit<T, "choices"> & {
  choices: Array<
    T["choices"][number] & {
      message: T["choices"][number]["message"] & { reasoning_content?: string | null };
    }
  >;
};

/** The `reasoning_content` deltas of a stream, concatenated per choice index. */
export class ReasoningContent {
  readonly #byChoice = new Map<number, string>();

  /** Adds one chunk's deltas (a `null` or missing delta adds nothing). */
  add(chunk: ReasoningChunk): void {
    for (const choice of chunk.choices) {
      const delta = choice.delta as { readonly reasoning_content?: unknown } | null | undefined;
      const part = delta?.reasoning_content;
      if (typeof part === "string") {
        this.#byChoice.set(choice.index, (this.#byChoice.get(choice.index) ?? "") + part);
      }
    }
  }

  /** The concatenated reasoning of choice `index`; `undefined` when none arrived. */
  of(index = 0): string | undefined {
    return this.#byChoice.get(index);
  }

  /**
   * A copy of `completion` whose choices' messages carry the concatenated `reasoning_content`
   * (the choices no reasoning arrived for keep what they had). `completion` is not changed.
   */
  applyTo<T extends CompletionWithChoices>(completion: T): WithReasoningContent<T> {
    return {
      ...completion,
      choices: completion.choices.map((choice) => {
        const reasoning = this.#byChoice.get(choice.index);
        if (reasoning === undefined) return { ...choice };
        return { ...choice, message: { ...choice.message, reasoning_content: reasoning } };
      }),
    } as WithReasoningContent<T>;
  }
}

/** The parts of the `openai` SDK's `ChatCompletionStream` this module uses. */
export interface ChunkStream<T extends CompletionWithChoices> {
  on(event: "chunk", listener: (chunk: ReasoningChunk) => void): unknown;
  finalChatCompletion(): Promise<T>;
}

/**
 * `stream.finalChatCompletion()` with every `reasoning_content` delta concatenated. Call it right
 * after creating the stream (before awaiting anything), so that no chunk is emitted before it
 * listens.
 */
export async function finalChatCompletionWithReasoning<T extends CompletionWithChoices>(
  stream: ChunkStream<T>,
): Promise<WithReasoningContent<T>> {
  const reasoning = new ReasoningContent();
  stream.on("chunk", (chunk) => reasoning.add(chunk));
  return reasoning.applyTo(await stream.finalChatCompletion());
}
