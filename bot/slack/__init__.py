"""The Slack face: a slack-bolt app built by a factory, listeners registered in one place.

``create_app(config)`` builds the app; ``register_listeners`` wires the slash command, events,
shortcut, actions, modal and App Home to plain functions in ``listeners``; slow work (downloads,
collection, diagnosis) runs in a bounded worker pool after every listener has acked.
"""
