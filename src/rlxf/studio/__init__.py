"""``rlxf studio``: a local web app to watch runs, label preferences in a browser, and train on the labels.

Modules, one concept each: ``store`` (SQLite, WAL), ``campaigns`` and ``sampling`` (where pairs come
from), ``labelling`` (issuing pairs, recording verdicts, undo), ``ai_labels`` and ``agreement`` (AI
verdicts, accuracy and Cohen's kappa), ``export`` and ``train_action`` (labels to training), ``runs``
(reading run directories), ``app`` / ``api_*`` / ``security`` / ``server`` (the web side), ``driver``
(scripting it through a headless Chromium). The pages are ``static/``. docs/studio.md is the user guide.
"""
