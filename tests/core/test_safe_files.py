"""Arguments screened before any work (`core.safe_files.unusable_argument`)."""

from pathlib import Path


def test_an_argument_is_screened_item_by_item() -> None:
    """The command line's and an agent's arguments share one screen: the first text that is no
    Unicode or float that is not finite, inside lists and tuples too, with why."""
    from kernel_atlas.core.safe_files import unusable_argument

    assert unusable_argument("fine") is None
    assert unusable_argument([1.5, Path("a/b"), 3, None, "x"]) is None
    assert unusable_argument(Path("run/\udcff.json")) == (Path("run/\udcff.json"), "text")
    assert unusable_argument(("ok", "lone \ud800")) == ("lone \ud800", "text")
    found = unusable_argument([1.0, float("-inf"), float("nan")])
    assert found is not None and found[0] == float("-inf") and found[1] == "number"
