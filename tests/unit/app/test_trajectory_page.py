"""ListTrajectory by reference on the fake storage: each distinct prompt and tool set once per
page, pages bounded in bytes (the estimate never below the encoded page), an entry larger than
the budget alone on its page."""

from __future__ import annotations

import pytest
from admission_service.api import convert
from admission_service.app import handlers
from admission_service.app.commands import AdmitCommand
from admission_service.app.deps import Deps
from admission_service.app.limits import Limits
from admission_service.app.page_tokens import PageTokens
from admission_service.app.trajectory_page import TrajectoryPage
from admission_service.domain.messages import Tool
from admission_service.domain.trajectory import prompt_version, tool_set_version

from tests.app_support import CATALOG, ROUTE, user
from tests.fakes.storage import FakeStorage
from tests.unit.app.test_use_cases import ENCODERS, decode

TOOLS = (
    Tool("read", "Read a file", '{"type":"object"}'),
    Tool("write", "Write a file " + "w" * 3000, '{"type":"object"}'),
)


def make_app(**limits: int) -> Deps:
    return Deps.compose(
        None,
        CATALOG,
        Limits(**limits),
        page_tokens=PageTokens([b"k" * 32]),
        storage=FakeStorage(),
        encoders=ENCODERS,
    )


async def session(deps: Deps, prompts: list[str], config: tuple[tuple[str, str], ...] = ()) -> str:
    decode(await handlers.create_session(deps, "t", "s", None))
    for step, prompt in enumerate(prompts, start=1):
        command = AdmitCommand(
            "s", 1, step, prompt, TOOLS, ROUTE, (user(f"u{step}"),), config=config
        )
        decode(await handlers.admit(deps, "t", command, None))
    return "s"


async def every_page(deps: Deps, page_size: int = 0) -> list[TrajectoryPage]:
    pages, token = [], ""
    while True:
        page = await handlers.list_trajectory(deps, "t", "s", page_size, token)
        pages.append(page)
        if not (token := page.next_page_token):
            return pages


async def test_a_page_carries_each_distinct_prompt_and_tool_set_once() -> None:
    deps = make_app()
    prompts = ["A " * 500, "B " * 500] * 10
    await session(deps, prompts)
    (page,) = await every_page(deps)
    proto = convert.list_trajectory_response(page)

    assert len(proto.entries) == 20
    assert [p.text for p in proto.system_prompts] == prompts[:2]
    assert [p.id for p in proto.system_prompts] == [prompt_version(p) for p in prompts[:2]]
    (tool_set,) = proto.tool_sets
    assert tool_set.id == tool_set_version(TOOLS) and [t.name for t in tool_set.tools] == [
        "read",
        "write",
    ]
    for entry, prompt in zip(proto.entries, prompts, strict=True):
        # The entries name the contents; no text or tool is repeated in them.
        assert entry.effective_prompt_id == prompt_version(prompt)
        assert entry.effective_prompt.text == "" and entry.header.prompt.system_prompt == ""
        assert entry.header.prompt.system_prompt_id == prompt_version(prompt)
        assert entry.header.prompt.tool_set_id == tool_set.id and not entry.header.prompt.tools
    # Without references every entry held two prompts and the tool set: here the page is the
    # contents once and a few hundred bytes per entry.
    contents = sum(len(p) for p in prompts[:2]) + tool_set.ByteSize()
    assert proto.ByteSize() < contents + 20 * 800


@pytest.mark.parametrize("budget", [3_000, 8_192, 40_000])
async def test_pages_stop_at_the_byte_budget_and_the_estimate_covers_the_encoding(
    budget: int,
) -> None:
    deps = make_app(max_trajectory_page_bytes=budget)
    prompts = [f"prompt {i} " + "p" * 1500 for i in range(30)]
    await session(deps, prompts, config=(("temperature", "0.2"), ("top_p", "x" * 200)))
    pages = await every_page(deps, page_size=1000)

    entries = [entry for page in pages for entry in page.items]
    assert [entry.request_index for entry in entries] == list(range(30))
    for page in pages:
        size = convert.list_trajectory_response(page).ByteSize()
        assert size <= budget or len(page.items) == 1, (size, len(page.items))
    assert len(pages) > 1
    # Each page stands alone: the contents its entries name are on it.
    for page in pages:
        proto = convert.list_trajectory_response(page)
        ids = {p.id for p in proto.system_prompts}
        for entry in proto.entries:
            assert entry.effective_prompt_id in ids
            assert entry.change.previous.system_prompt_id in ids | {""}


async def test_an_entry_larger_than_the_budget_comes_alone_on_its_page() -> None:
    deps = make_app(max_trajectory_page_bytes=1024)
    await session(deps, ["x" * 5000, "y" * 5000, "y" * 5000])
    pages = await every_page(deps)
    assert [len(page.items) for page in pages] == [1, 1, 1]
    assert [page.items[0].request_index for page in pages] == [0, 1, 2]
    # The last entry's header is the update to y, whose change names x as the previous prompt.
    assert list(pages[-1].prompts.values()) == ["y" * 5000, "x" * 5000]


async def test_the_page_size_still_bounds_a_page_within_the_budget() -> None:
    deps = make_app()
    await session(deps, ["A"] * 5)
    pages = await every_page(deps, page_size=2)
    assert [len(page.items) for page in pages] == [2, 2, 1]
    assert all(list(page.prompts.values()) == ["A"] for page in pages)
