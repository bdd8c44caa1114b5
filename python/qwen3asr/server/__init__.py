"""Serving one loaded engine to many clients (OpenAI-compatible HTTP, WebSocket, Wyoming).

``scheduler`` has no web dependencies; the protocol modules need the ``server`` extra.
"""
