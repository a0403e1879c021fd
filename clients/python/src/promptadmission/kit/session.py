"""A harness's session through the service, one call per model call.

``HarnessSession`` keeps what every harness would otherwise write by hand around ``Admit``:

- ``admit(prompt, users, tools, config)`` returns the provider body to post (a dict the SDK
  takes as keyword arguments: ``client.messages.create(model=..., **body)``), whole, although
  the kit asks for DELTA views and receives only the new messages, in every provider format
  (``bodies.HeldRequest``: an Anthropic Messages DELTA may re-send the held turn it changed);
- ``observe(response)`` converts the provider's response (``model_output``) and keeps it, with
  the tool results added by ``tool_result(call, value)``, as the next Admit's
  ``previous_output``;
- the turn and step numbers: a step after a response that made tool calls is the next step of
  the turn, a step after a response that made none starts the next turn;
- retries: a call that failed is repeated with the same ``request_id`` (so an Admit that
  committed but lost its answer is answered from the service's record, not admitted twice),
  and the output it carried stays pending until a call succeeds;
- responses of any size: an Admit or Reconcile whose response is too large for one message
  (``RESPONSE_TOO_LARGE``: a FULL body, the first or after a compaction, and a step's new tool
  outputs may be large) is made again as StreamAdmit / StreamReconcile, the same request and
  ``request_id`` (the refused call committed nothing), its chunks reassembled and verified;
- ``close()`` records the pending output of the turn's last step (``Record``).

It holds no lock and is not shared between tasks: one harness loop owns one session.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from promptadmission.client import AdmissionClient
from promptadmission.errors import AdmissionError, Reason
from promptadmission.kit.bodies import HeldRequest
from promptadmission.kit.json_text import dumps
from promptadmission.kit.outputs import ModelOutput, model_output
from promptadmission.kit.tool_results import tool_result
from promptadmission.messages import user_message
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

__all__ = ["HarnessSession", "tool"]

Body = dict[str, Any]


def tool(name: str, description: str = "", parameters: Mapping[str, Any] | None = None) -> pb.Tool:
    """A tool for ``admit``: its parameter schema written once, in a stable serialization (the
    service compares tool sets byte for byte)."""
    schema = "" if parameters is None else dumps(dict(parameters))
    return pb.Tool(name=name, description=description, parameters_json=schema)


class _Steps:
    """The bookkeeping, without I/O: the next request of each kind, and what a response or an
    observed output changes. A request keeps its ``request_id`` until a call of its kind
    succeeds, so the shell's retry of a failed call repeats the same key."""

    def __init__(
        self, session_id: str, route: pb.Route, wire_format: pb.WireFormat.ValueType, turn: int
    ) -> None:
        self.session_id = session_id
        self.route = route
        self.wire_format = wire_format
        self.turn = turn
        self.step = 0
        self.resume = False
        self.admission_id = ""
        self.held: HeldRequest | None = None
        self.output: ModelOutput | None = None
        self.results: list[pb.ToolResult] = []
        # The step's response made no tool calls: the model answered, the turn is over.
        self.answered = False
        self._request_ids: dict[str, str] = {}

    def request_id(self, kind: str) -> str:
        return self._request_ids.setdefault(kind, str(uuid.uuid4()))

    def succeeded(self, kind: str) -> None:
        self._request_ids.pop(kind, None)

    def _next_step(self) -> tuple[int, int]:
        if self.answered:
            return self.turn + 1, 1
        return self.turn, self.step + 1

    def _view(self) -> tuple[pb.RequestView.ValueType, pb.HeldPrefix | None]:
        if self.held is None:
            return pb.REQUEST_VIEW_FULL, None
        return pb.REQUEST_VIEW_DELTA, self.held.prefix

    def pending_output(self) -> api.StepOutput | None:
        if self.output is None and not self.results:
            return None
        return api.StepOutput(
            admission_id=self.admission_id,
            assistant=self.output.assistant if self.output else None,
            tool_results=self.results,
            usage=self.output.usage if self.output else None,
        )

    def admit_request(
        self,
        prompt: str,
        users: Sequence[str | pb.Message],
        tools: Sequence[pb.Tool],
        config: Mapping[str, Any] | None,
        starts_series: bool,
    ) -> api.AdmitRequest:
        turn, step = self._next_step()
        view, held_prefix = self._view()
        return api.AdmitRequest(
            session_id=self.session_id,
            request_id=self.request_id("admit"),
            turn=turn,
            step=step,
            rendered_prompt=prompt,
            tools=tools,
            route=self.route,
            starts_request_series=starts_series,
            users=[user_message(user) if isinstance(user, str) else user for user in users],
            resume=self.resume,
            wire_format=self.wire_format,
            view=view,
            held_prefix=held_prefix,
            config={
                key: v if isinstance(v, str) else dumps(v) for key, v in (config or {}).items()
            },
            previous_output=self.pending_output(),
        )

    def admitted(self, request: api.AdmitRequest, response: api.AdmitResponse) -> Body:
        self.succeeded("admit")
        self.turn, self.step = request.turn, request.step
        self.resume = False
        self.admission_id = response.admission_id
        self.output, self.results, self.answered = None, [], False
        return self.derived(response.request)

    def observed(self, output: ModelOutput) -> ModelOutput:
        self.output = output
        self.answered = not output.tool_calls
        return output

    def reconcile_request(self, route: pb.Route | None) -> api.ReconcileRequest:
        if not self.admission_id:
            raise RuntimeError("retry: no step has been admitted yet")
        if route is not None:
            self.route = route
        view, held_prefix = self._view()
        return api.ReconcileRequest(
            session_id=self.session_id,
            request_id=self.request_id("reconcile"),
            admission_id=self.admission_id,
            route=self.route,
            wire_format=self.wire_format,
            view=view,
            held_prefix=held_prefix,
        )

    def derived(self, request: pb.DerivedRequest) -> Body:
        self.held = HeldRequest.of(request, self.held)
        return copy.deepcopy(self.held.body)

    def record_request(self) -> api.RecordRequest | None:
        output = self.pending_output()
        if output is None:
            return None
        return api.RecordRequest(
            session_id=self.session_id,
            request_id=self.request_id("record"),
            admission_id=output.admission_id,
            assistant=output.assistant if output.HasField("assistant") else None,
            tool_results=output.tool_results,
            usage=output.usage if output.HasField("usage") else None,
        )

    def recorded(self) -> None:
        self.succeeded("record")
        self.output, self.results = None, []


class HarnessSession:
    """One session of a harness on one route and wire format (see the module's docstring).

    ``await HarnessSession.open(client, route, wire_format)`` creates a session;
    ``HarnessSession(client, session_id, route, wire_format, resume=True)`` resumes one (its
    first Admit declares the resume). Use it as ``async with`` or call ``close()``.
    """

    def __init__(
        self,
        client: AdmissionClient,
        session_id: str,
        route: pb.Route,
        wire_format: pb.WireFormat.ValueType,
        *,
        turn: int = 1,
        resume: bool = False,
    ) -> None:
        if wire_format in (pb.WIRE_FORMAT_UNSPECIFIED, pb.WIRE_FORMAT_NEUTRAL):
            raise ValueError("wire_format: the kit builds provider bodies; pick a provider format")
        self.client = client
        self._steps = _Steps(session_id, route, wire_format, turn)
        self._steps.resume = resume
        self.last: api.AdmitResponse | api.ReconcileResponse | None = None

    @classmethod
    async def open(
        cls,
        client: AdmissionClient,
        route: pb.Route,
        wire_format: pb.WireFormat.ValueType,
        *,
        session_id: str = "",
    ) -> HarnessSession:
        created = await client.create_session(api.CreateSessionRequest(session_id=session_id))
        return cls(client, created.session.session_id, route, wire_format)

    @property
    def session_id(self) -> str:
        return self._steps.session_id

    @property
    def turn(self) -> int:
        return self._steps.turn

    @property
    def step(self) -> int:
        return self._steps.step

    async def admit(
        self,
        prompt: str,
        users: Sequence[str | pb.Message] = (),
        tools: Sequence[pb.Tool] = (),
        config: Mapping[str, Any] | None = None,
        *,
        starts_series: bool = False,
    ) -> Body:
        """Admits the next step, recording the pending output first; the body to post."""
        request = self._steps.admit_request(prompt, users, tools, config, starts_series)
        try:
            response = await self.client.admit(request)
        except AdmissionError as error:
            if error.reason != Reason.RESPONSE_TOO_LARGE:
                raise
            response = await self.client.admit_streamed(request)
        self.last = response
        return self._steps.admitted(request, response)

    def observe(self, response: Any) -> ModelOutput:
        """Keeps the provider's response as this step's output; returns it converted."""
        return self._steps.observed(model_output(response, provider=self._steps.route.provider))

    def tool_result(
        self, call: pb.ToolCallBlock | str, value: Any, *, is_error: bool = False
    ) -> pb.ToolResult:
        """Adds a tool's result (``tool_results.tool_result``) to this step's output."""
        result = tool_result(call, value, is_error=is_error)
        self._steps.results.append(result)
        return result

    async def retry(self, route: pb.Route | None = None) -> Body:
        """The step again (``Reconcile``), for example on a fallback ``route``; the body."""
        request = self._steps.reconcile_request(route)
        try:
            response = await self.client.reconcile(request)
        except AdmissionError as error:
            if error.reason != Reason.RESPONSE_TOO_LARGE:
                raise
            response = await self.client.reconcile_streamed(request)
        self._steps.succeeded("reconcile")
        self.last = response
        return self._steps.derived(response.request)

    async def record(self) -> api.RecordResponse | None:
        """Records the pending output now (``close`` does it for a turn's last step)."""
        request = self._steps.record_request()
        if request is None:
            return None
        response = await self.client.record(request)
        self._steps.recorded()
        return response

    async def compact(
        self,
        summarize: Callable[[api.PlanCompactionResponse], Awaitable[str]],
        *,
        retain_tokens: int,
    ) -> api.CompactResponse:
        """Records the pending output, plans a compaction keeping about ``retain_tokens`` of
        the latest history, asks ``summarize`` for the summary of the plan's
        ``summarization_input`` and commits it. The next Admit answers FULL."""
        await self.record()
        plan = await self.client.plan_compaction(
            api.PlanCompactionRequest(session_id=self.session_id, retain_tokens=retain_tokens)
        )
        summary = await summarize(plan)
        response = await self.client.compact(
            api.CompactRequest(
                session_id=self.session_id,
                request_id=self._steps.request_id("compact"),
                plan_token=plan.plan_token,
                summary=summary,
            )
        )
        self._steps.succeeded("compact")
        return response

    async def close(self) -> None:
        await self.record()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self.close()
