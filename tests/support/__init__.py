"""Test helpers shared by the test packages: real and synthetic traces, hostile input, fuzzing, a browser."""
