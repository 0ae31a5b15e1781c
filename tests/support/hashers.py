"""The tests' password hasher: PBKDF2-SHA256 with one round. Its hashes carry their round count
(`pbkdf2_sha256$1$…`), so the live servers the tests start — other processes, with the real
hashers — verify them too (a user made in the test process signs in on a live daphne)."""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class OneRoundPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1
