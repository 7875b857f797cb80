"""Deterministic simulation of kgroup members against a model of Kafka's group coordinator.

See ``_world.py`` (a schedule's parameters, faults and invariants), ``_network.py`` (the
connections, brokers and message faults), ``_process.py`` (a member process),
``_model.py`` and ``_model_848.py`` (the coordinator of each protocol) and
``test_simulation.py`` (what is checked). Replay one schedule with
``python -m tests.simulation --seed N --trace``.
"""
