"""Helpers shared by several test modules (fixtures' building blocks, live-process plumbing).
Test modules import from here, never from each other."""
