"""The verified-end-users stack of ``test_end_users.py`` (``idp``, ``stack``), for the attacks on it
(``test_attack_end_user_headers.py``); a module's own fixture of the same name wins over these."""

from tests.access.test_end_users import idp, stack  # noqa: F401  (fixtures)
