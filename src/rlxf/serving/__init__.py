"""What rlxf serves over HTTP while it trains: the OpenAI-compatible endpoint over the policy
(``openai_app.py``) that agent programs talk to (docs/environments.md, "Any agent program")."""
