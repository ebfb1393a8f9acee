"""Models: they know positions and shapes, never a task, curriculum or trainer."""
from internalize.models.linear_attention import LinearAttention
from internalize.models.logicot import GatePlan, LogICoT, gate_plan

__all__ = ["GatePlan", "LinearAttention", "LogICoT", "gate_plan"]
