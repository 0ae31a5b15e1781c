"""console.templatetags.gavel.inline_code: a runtime's plain text (a call's reason) with its
`backticked` names shown as code, everything else escaped."""

from django.template import Context, Template

from console.templatetags.gavel import inline_code


def test_backticked_names_are_code_and_everything_else_is_escaped():
    assert inline_code("`write_file` on `workspace` waits for a reviewer") == (
        "<code>write_file</code> on <code>workspace</code> waits for a reviewer"
    )
    assert inline_code("<b>`x<y>`</b> & `a&b`") == (
        "&lt;b&gt;<code>x&lt;y&gt;</code>&lt;/b&gt; &amp; <code>a&amp;b</code>"
    )


def test_unpaired_empty_and_multiline_backticks_stay_text():
    assert inline_code("a ` b") == "a ` b"
    assert inline_code("an empty `` pair") == "an empty `` pair"
    assert inline_code("`x\ny`") == "`x\ny`"
    assert inline_code("") == ""


def test_in_a_template_it_is_not_escaped_twice():
    rendered = Template("{% load gavel %}{{ reason|inline_code }}").render(
        Context({"reason": "`send_email` <script>"})
    )
    assert rendered == "<code>send_email</code> &lt;script&gt;"
