"""Each adapter is importable only with its framework, and says how to get it otherwise."""

import importlib
import subprocess
import sys

import pytest

ADAPTERS = [
    ("gavel_sdk.adapters.pydantic_ai", "pydantic_ai", "gavel-sdk[pydantic-ai]"),
    ("gavel_sdk.adapters.openai_agents", "agents", "gavel-sdk[openai-agents]"),
    ("gavel_sdk.adapters.langgraph", "langgraph.types", "gavel-sdk[langgraph]"),
]


@pytest.mark.parametrize(("adapter", "framework", "extra"), ADAPTERS)
def test_an_adapter_without_its_framework_names_the_extra_to_install(
    monkeypatch, adapter, framework, extra
):
    monkeypatch.setitem(sys.modules, framework, None)  # `import framework` now fails
    monkeypatch.delitem(sys.modules, adapter, raising=False)
    with pytest.raises(ImportError) as caught:
        importlib.import_module(adapter)
    assert f'pip install "{extra}"' in str(caught.value)


def test_the_core_sdk_imports_no_framework_and_no_django():
    code = (
        "import sys, gavel_sdk, gavel_sdk.session; "
        "bad = [m for m in ('django', 'pydantic_ai', 'agents', 'langgraph') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
