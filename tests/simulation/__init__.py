"""Deterministic simulation of kgroup members against a model of Kafka's group coordinator.

See ``_world.py`` (the scheduler, network and members), ``_model.py`` (the coordinator) and
``test_simulation.py`` (what is checked). Replay one schedule with
``python -m tests.simulation --seed N --trace``.
"""
