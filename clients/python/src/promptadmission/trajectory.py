"""Reading ``ListTrajectory`` by reference.

Each entry names its system prompts and tool sets by version id
(``PromptSnapshot.system_prompt_id``, ``PromptSnapshot.tool_set_id``,
``TrajectoryEntry.effective_prompt_id``) and each page carries each distinct text and tool set
once (``ListTrajectoryResponse.system_prompts``, ``tool_sets``). A version id is a hash of the
content, so what one page carried stays valid for every later page: ``Trajectory`` keeps each
distinct content once, whatever the number of pages and entries that name it.

``Trajectory.add(page)`` keeps a page (``add_contents(page)`` only its contents);
``system_prompt``, ``tools`` and ``effective_prompt`` look contents up; ``resolved(entry)`` is a
copy of an entry with every text and tool set filled in (the entry as it reads without
references; it repeats the contents, so call it per entry). ``AdmissionClient.all_trajectory``
and ``SyncAdmissionClient.all_trajectory`` read every page.
"""

from __future__ import annotations

from promptadmission.v1 import admission_service_pb2 as pb
from promptadmission.v1 import session_pb2
from promptadmission.v1 import trajectory_pb2 as tpb

__all__ = ["Trajectory"]


class Trajectory:
    """The entries of the ``ListTrajectory`` pages added so far, in order, and each distinct
    system prompt and tool set they name, once, by version id."""

    def __init__(self) -> None:
        self.entries: list[tpb.TrajectoryEntry] = []
        self.system_prompts: dict[str, str] = {}
        self.tool_sets: dict[str, list[session_pb2.Tool]] = {}

    def add(self, page: pb.ListTrajectoryResponse) -> None:
        """Keep a page's entries and the contents it carries."""
        self.entries.extend(page.entries)
        self.add_contents(page)

    def add_contents(self, page: pb.ListTrajectoryResponse) -> None:
        """Keep only the contents a page carries (a reader that handles each page's entries
        as they arrive)."""
        for prompt in page.system_prompts:
            self.system_prompts.setdefault(prompt.id, prompt.text)
        for tool_set in page.tool_sets:
            self.tool_sets.setdefault(tool_set.id, list(tool_set.tools))

    def system_prompt(self, snapshot: tpb.PromptSnapshot) -> str:
        """The system prompt ``snapshot`` names ('' for none)."""
        return self._prompt(snapshot.system_prompt_id)

    def tools(self, snapshot: tpb.PromptSnapshot) -> list[session_pb2.Tool]:
        """The tool set ``snapshot`` names ([] for none)."""
        if not snapshot.tool_set_id:
            return []
        try:
            return self.tool_sets[snapshot.tool_set_id]
        except KeyError:
            raise KeyError(f"no page added carries tool set {snapshot.tool_set_id}") from None

    def effective_prompt(self, entry: tpb.TrajectoryEntry) -> str:
        """The prompt the model saw for ``entry`` ('' for none)."""
        return self._prompt(entry.effective_prompt_id)

    def resolved(self, entry: tpb.TrajectoryEntry) -> tpb.TrajectoryEntry:
        """A copy of ``entry`` with every prompt text and tool set filled in."""
        copy = tpb.TrajectoryEntry()
        copy.CopyFrom(entry)
        facts = [*copy.headers, *([copy.header] if copy.HasField("header") else [])]
        snapshots = [fact.prompt for fact in facts]
        changes = [fact.change for fact in facts if fact.HasField("change")]
        if copy.HasField("change"):
            changes.append(copy.change)
        snapshots += [change.previous for change in changes if change.HasField("previous")]
        for snapshot in snapshots:
            if snapshot.system_prompt_id:
                snapshot.system_prompt = self.system_prompt(snapshot)
            snapshot.tools.extend(self.tools(snapshot))
        if entry.effective_prompt_id:
            copy.effective_prompt.text = self.effective_prompt(entry)
        return copy

    def _prompt(self, version: str) -> str:
        if not version:
            return ""
        try:
            return self.system_prompts[version]
        except KeyError:
            raise KeyError(f"no page added carries system prompt {version}") from None
