"""A newcomer's walkthrough of the Neos loop on CPU: world -> tasks -> rollouts -> judge -> turn credit ->
advantages -> report (``python -m verl_ext.walkthrough``; ``make demo`` runs it after building the world and tasks).

Modules: ``questions`` (verified tasks), ``behaviour`` (the scripted behaviour policy), ``rollouts`` (verl's agent
loop), ``scoring`` (the reward manager), ``credit`` (group judging, advantages through verl), ``pipeline`` (the run),
``plots`` and ``report`` (the report directory).
"""
