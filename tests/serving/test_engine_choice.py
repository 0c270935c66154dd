"""The replica's engine comes from config; the vLLM choice fails clearly where vLLM is absent."""

import pytest

pytest.importorskip("pydantic", reason="config tests need the CPU install (the GPU image has no pydantic)")

from pydantic import ValidationError  # noqa: E402

from agentctx.config import AgentctxConfig, ModelConfig  # noqa: E402
from agentctx.serving.vllm_engine import VLLMUnavailableError, vllm_available  # noqa: E402


def test_engine_field_is_validated():
    assert ModelConfig().engine == "local"
    assert AgentctxConfig.model_validate({"model": {"engine": "vllm"}}).model.engine == "vllm"
    with pytest.raises(ValidationError, match="engine"):
        ModelConfig(engine="tgi")
    with pytest.raises(ValidationError, match="vllm_kv_cache_gib"):
        ModelConfig(vllm_kv_cache_gib=0)


@pytest.mark.skipif(vllm_available(), reason="vLLM is installed here; tests/vllm covers it")
def test_vllm_engine_without_vllm_names_the_install_command():
    from agentctx.serving.serve.replica import build_engine

    with pytest.raises(VLLMUnavailableError, match="setup_vllm.sh"):
        build_engine(ModelConfig(engine="vllm").engine_config())
