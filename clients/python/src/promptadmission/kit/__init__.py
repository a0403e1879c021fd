"""The harness kit: a tool-using harness's step through the service in a few lines.

- ``HarnessSession``: open or resume a session for a route and wire format; ``admit`` returns
  the provider body to post, ``observe`` keeps the provider's response as the next Admit's
  ``previous_output``, ``tool_result`` adds a tool's result, ``close`` records the last output.
- ``model_output``: an OpenAI ``ChatCompletion`` (DeepSeek's included), an OpenAI ``Response``
  or an Anthropic ``Message`` (streamed ones too, as the SDK accumulates them) as the service's
  assistant ``Message`` and ``Usage``; ``tool_result`` a harness's value as a ``ToolResult``.

The kit reads the SDKs' objects but imports no SDK: install ``openai`` or ``anthropic`` for the
provider you use.
"""

from promptadmission.kit.outputs import ModelOutput, model_output
from promptadmission.kit.session import HarnessSession, tool
from promptadmission.kit.tool_results import ToolImage, tool_result

__all__ = ["HarnessSession", "ModelOutput", "ToolImage", "model_output", "tool", "tool_result"]
