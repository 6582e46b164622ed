"""Tests of the command line: bad and hostile input, help texts, fuzzing, the light install."""
