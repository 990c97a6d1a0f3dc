"""tools.commit_subject: the commit-msg hook's rule (subject at most 72 characters, then a blank
line)."""

from __future__ import annotations

from tools.commit_subject import MAX_SUBJECT, main, problem


def test_a_short_subject_with_a_body_passes():
    assert problem("fpga: the probe compiles a kernel first\n\nWhy, in the body.\n") is None
    assert problem("x" * MAX_SUBJECT + "\n") is None


def test_a_long_or_missing_subject_or_a_glued_body_is_named():
    assert "73 characters, over 72" in problem("x" * 73)
    assert "no subject" in problem("\n\nbody only")
    assert "no subject" in problem("# a comment git strips\n")
    assert "blank line" in problem("subject\nbody glued to it")


def test_the_hook_exit_codes(tmp_path, capsys):
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.write_text("docs: one page per backend\n")
    bad.write_text("y" * 80 + "\n")
    assert main([str(good)]) == 0
    assert main([str(bad)]) == 1 and "80 characters" in capsys.readouterr().err
    assert main([]) == 2
