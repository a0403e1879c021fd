"""The trajectory as text: ``admission-service inspect SESSION_ID --trajectory``.

One block per derived request, oldest first: the header fact in force (route, tools,
configuration; *synthetic* when an in-history prompt update produced it), the effective prompt
the model saw, the change against the previous request with the previous prompt, whether the
request started a series, and the cache forecast beside the observed usage.
"""

from __future__ import annotations

import json

from promptadmission.v1 import session_pb2 as pb
from promptadmission.v1 import trajectory_pb2 as tpb

PREVIEW_CHARS = 72


def _quote(text: str) -> str:
    cut = text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"
    return json.dumps(cut, ensure_ascii=False)


def _name(value: str, prefix: str) -> str:
    return value.removeprefix(prefix).lower()


def _fact(fact: tpb.HeaderFact) -> str:
    prompt = fact.prompt
    if fact.synthetic:
        origin = "synthetic: in-history prompt update"
    else:
        origin = _name(pb.HeaderReason.Name(fact.reason), "HEADER_REASON_")
        if fact.starts_series:
            origin += ", starts series"
    tools = ", ".join(tool.name for tool in prompt.tools) or "no tools"
    config = ", ".join(f"{key}={value}" for key, value in sorted(prompt.config.items()))
    return (
        f"seq {fact.seq} ({origin}): {prompt.provider}/{prompt.model}, "
        f"tools: {tools}; config: {config or 'none'}"
    )


def _change(change: tpb.PromptChange) -> str:
    kind = _name(tpb.PromptChangeKind.Name(change.kind), "PROMPT_CHANGE_KIND_").replace("_", " ")
    text = f"{kind} (seq {change.seq})"
    if change.HasField("previous"):
        previous = change.previous
        text += f"; previous prompt {_quote(previous.system_prompt)}"
        if change.kind in (tpb.PROMPT_CHANGE_KIND_TOOLS, tpb.PROMPT_CHANGE_KIND_SYSTEM_AND_TOOLS):
            tools = ", ".join(tool.name for tool in previous.tools) or "no tools"
            text += f", previous tools: {tools}"
    return text


def format_trajectory(session_id: str, entries: list[tpb.TrajectoryEntry]) -> str:
    """The operator's view of a session's trajectory."""
    lines = [f"trajectory of session {session_id} ({len(entries)} requests)"]
    add = lines.append
    for entry in entries:
        series = ", starts series" if entry.starts_series else ""
        add("")
        add(
            f"request {entry.request_index}: admission {entry.admission_id[:12]} attempt "
            f"{entry.attempt}, saw events 0..{entry.log_seq - 1}{series}"
        )
        add("  header  " + (_fact(entry.header) if entry.HasField("header") else "none"))
        for fact in entry.headers:
            if fact.seq != entry.header.seq:
                add("  logged  " + _fact(fact))
        if entry.HasField("effective_prompt"):
            prompt = entry.effective_prompt
            flag = ", in-history update" if prompt.update else ""
            add(f"  prompt  seq {prompt.seq}{flag}: {_quote(prompt.text)}")
        else:
            add("  prompt  none")
        add("  change  " + (_change(entry.change) if entry.HasField("change") else "none"))
        forecast = entry.forecast
        reason = _name(pb.DivergenceReason.Name(forecast.divergence_reason), "DIVERGENCE_REASON_")
        observed = "not recorded"
        if entry.HasField("observed"):
            usage = entry.observed
            observed = (
                f"input {usage.input_tokens}, cache read {usage.cache_read_tokens}, "
                f"output {usage.output_tokens}"
            )
        add(
            f"  cache   forecast {forecast.reused_tokens}/{forecast.total_tokens} tokens reused "
            f"({reason}); observed {observed}"
        )
    return "\n".join(lines) + "\n"
