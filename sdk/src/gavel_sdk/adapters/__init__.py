"""Framework adapters. Each module imports its framework and says how to install it if absent:

- `gavel_sdk.adapters.pydantic_ai`   (pip install "gavel-sdk[pydantic-ai]")
- `gavel_sdk.adapters.openai_agents` (pip install "gavel-sdk[openai-agents]")
- `gavel_sdk.adapters.langgraph`     (pip install "gavel-sdk[langgraph]")
"""


def require(module: str, extra: str, framework: str):
    """Import a framework module, or raise an ImportError that says what to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"gavel_sdk.adapters needs {framework} for this adapter: "
            f'pip install "gavel-sdk[{extra}]" (could not import {module}: {exc})'
        ) from exc
