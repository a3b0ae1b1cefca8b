"""A2A: the agents published over Agent2Agent 1.0 (docs/a2a.md).

``handler.AgentTasks`` is the A2A SDK's request handler over the Responses lifecycle (a task is a
stored background response); ``push_methods`` is its push-notification half and ``caller`` who
calls. ``tasks`` maps one shape to the other, ``cards`` builds each agent's Agent Card, ``store``
keeps which response answers for which task, ``push`` the push configs and their sending, and
``remote`` runs remote A2A agents as subagents. ``api/a2a.py`` serves them.
"""
