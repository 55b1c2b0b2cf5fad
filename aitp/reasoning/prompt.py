"""The system prompt and chat messages of a reasoning item (think first, then one tagged answer)."""

from __future__ import annotations

from aitp.reasoning.items import Item

SYSTEM_PROMPT = (
    "You are a careful reasoner. Think the problem through step by step inside <think></think> tags; "
    "take as long as you need. When you are done thinking, state your final answer exactly once, "
    "inside <answer></answer> tags. You may add a short explanation before or after the answer tags, "
    "but give one single answer, and only inside <answer> tags."
)


def build_messages(item: Item, system_prompt: str = SYSTEM_PROMPT) -> list[dict[str, str]]:
    """The conversation a policy completes: the system prompt, then the task's question."""
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": item.question}]
