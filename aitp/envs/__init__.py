"""The reasoning environment over reasoning-gym: tasks, items, the prompt, scoring and group rules."""
