"""MLflow tracking, the model registry and the promotion gate (MLflow itself is imported lazily)."""

from aitp.registry.promotion import crown, decide, judge, promote, rollback
from aitp.registry.store import (
    CHALLENGER,
    CHAMPION,
    PREVIOUS,
    Decision,
    ModelVersion,
    PromotionConfig,
    PromotionError,
    Registry,
    RegistryError,
    default_tracking_uri,
    model_name,
)

__all__ = [
    "CHALLENGER",
    "CHAMPION",
    "PREVIOUS",
    "Decision",
    "ModelVersion",
    "PromotionConfig",
    "PromotionError",
    "Registry",
    "RegistryError",
    "crown",
    "decide",
    "judge",
    "default_tracking_uri",
    "model_name",
    "promote",
    "rollback",
]
