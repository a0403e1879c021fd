"""The trajectory as text: ``admission-service inspect SESSION_ID --trajectory``.

One block per derived request, oldest first: the header fact in force (route, tools,
configuration; *synthetic* when an in-history prompt update produced it), the effective prompt
the model saw, the change against the previous request with the previous prompt, whether the
request started a series, and the cache forecast beside the observed usage.

ListTrajectory answers by reference (``promptadmission.Trajectory`` holds each distinct prompt
and tool set once), so the text is written page by page: ``trajectory_heading``, then
``format_entries`` for each page's entries, then ``trajectory_footer``. A prompt shows the first
characters of its text and its version id: equal ids are equal prompts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from promptadmission import Trajectory
from promptadmission.v1 import session_pb2 as pb
from promptadmission.v1 import trajectory_pb2 as tpb

PREVIEW_CHARS = 72
VERSION_CHARS = 8


def _quote(text: str) -> str:
    cut = text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"
    return json.dumps(cut, ensure_ascii=False)


def _name(value: str, prefix: str) -> str:
    return value.removeprefix(prefix).lower()


def _version(version: str) -> str:
    return f" (version {version[:VERSION_CHARS]})" if version else ""


def _fact(contents: Trajectory, fact: tpb.HeaderFact) -> str:
    prompt = fact.prompt
    if fact.synthetic:
        origin = "synthetic: in-history prompt update"
    else:
        origin = _name(pb.HeaderReason.Name(fact.reason), "HEADER_REASON_")
        if fact.starts_series:
            origin += ", starts series"
    tools = ", ".join(tool.name for tool in contents.tools(prompt)) or "no tools"
    config = ", ".join(f"{key}={value}" for key, value in sorted(prompt.config.items()))
    return (
        f"seq {fact.seq} ({origin}): {prompt.provider}/{prompt.model}, "
        f"tools: {tools}; config: {config or 'none'}"
    )


def _change(contents: Trajectory, change: tpb.PromptChange) -> str:
    kind = _name(tpb.PromptChangeKind.Name(change.kind), "PROMPT_CHANGE_KIND_").replace("_", " ")
    text = f"{kind} (seq {change.seq})"
    if change.HasField("previous"):
        previous = change.previous
        text += f"; previous prompt {_quote(contents.system_prompt(previous))}"
        text += _version(previous.system_prompt_id)
        if change.kind in (tpb.PROMPT_CHANGE_KIND_TOOLS, tpb.PROMPT_CHANGE_KIND_SYSTEM_AND_TOOLS):
            tools = ", ".join(tool.name for tool in contents.tools(previous)) or "no tools"
            text += f", previous tools: {tools}"
    return text


def trajectory_heading(session_id: str) -> str:
    return f"trajectory of session {session_id}\n"


def trajectory_footer(requests: int) -> str:
    return f"\n({requests} requests)\n"


def format_entries(contents: Trajectory, entries: Iterable[tpb.TrajectoryEntry]) -> str:
    """The operator's view of some requests of a trajectory, one block each (``contents``
    holds at least the prompts and tool sets their page carried)."""
    lines: list[str] = []
    add = lines.append
    for entry in entries:
        series = ", starts series" if entry.starts_series else ""
        add("")
        add(
            f"request {entry.request_index}: admission {entry.admission_id[:12]} attempt "
            f"{entry.attempt}, saw events 0..{entry.log_seq - 1}{series}"
        )
        add("  header  " + (_fact(contents, entry.header) if entry.HasField("header") else "none"))
        for fact in entry.headers:
            if fact.seq != entry.header.seq:
                add("  logged  " + _fact(contents, fact))
        if entry.HasField("effective_prompt"):
            prompt = entry.effective_prompt
            flag = ", in-history update" if prompt.update else ""
            text = _quote(contents.effective_prompt(entry))
            add(f"  prompt  seq {prompt.seq}{flag}: {text}{_version(entry.effective_prompt_id)}")
        else:
            add("  prompt  none")
        change = _change(contents, entry.change) if entry.HasField("change") else "none"
        add("  change  " + change)
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
    return "".join(line + "\n" for line in lines)
