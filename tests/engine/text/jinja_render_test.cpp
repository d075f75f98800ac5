// The Jinja subset, unit by unit: the whitespace rules of transformers' environment,
// expressions, filters, tests, scoping, generation spans and error messages. Expected strings
// are what jinja2 3.1 renders with trim_blocks/lstrip_blocks (the reference parity test,
// chat_template_test.cpp, covers the same ground against jinja2 itself).
#include <gtest/gtest.h>

#include "engine/text/chat_template.h"
#include "engine/text/jinja_error.h"

namespace qtrain::engine::text {
namespace {

using json = nlohmann::ordered_json;

std::string render(const std::string& source, const json& vars = json::object()) {
  ChatTemplate t(source, "unit");
  ChatTemplateInput in;
  in.variables = vars;
  return t.render(in).text;
}

// The message of the TemplateError that parsing or rendering `source` throws.
std::string error_of(const std::string& source, const json& vars = json::object()) {
  try {
    render(source, vars);
  } catch (const TemplateError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(JinjaWhitespace, TrimBlocksRemovesOneNewlineAfterBlockTags) {
  EXPECT_EQ(render("{% if true %}\nyes\n{% endif %}\nafter\n"), "yes\nafter");
  EXPECT_EQ(render("{{ 'a' }}\nb\n"), "a\nb");  // not after }}
  EXPECT_EQ(render("{% if true +%}\nkept{% endif %}"), "\nkept");
  EXPECT_EQ(render("a\n{# c #}\nb"), "a\nb");
}

TEST(JinjaWhitespace, LstripBlocksOnlyAtLineStart) {
  EXPECT_EQ(render("line\n    {% if true %}\n    x\n    {% endif %}\nend"), "line\n    x\nend");
  EXPECT_EQ(render("x   {% if true %}y{% endif %}   z"), "x   y   z");
  EXPECT_EQ(render("    {{ 'v' }}"), "    v");
  EXPECT_EQ(render("a\n    {%+ if true %}b{% endif %}"), "a\n    b");
  EXPECT_EQ(render("   {% if true %}start{% endif %}"), "start");
  EXPECT_EQ(render("\t{% if true %}\ttab\n\t{% endif %}\n"), "\ttab\n");
}

TEST(JinjaWhitespace, MinusStripsAllWhitespace) {
  EXPECT_EQ(render("a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}  \n  c"), "abc");
  EXPECT_EQ(render("a \n {{- 'b' -}} \n c"), "abc");
  EXPECT_EQ(render("b {#- strip -#}   c"), "bc");
}

TEST(JinjaWhitespace, NewlinesAndTrailingNewline) {
  EXPECT_EQ(render("text\n\n"), "text\n");
  EXPECT_EQ(render("a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n"), "a\nb\nc");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(JinjaExpressions, ArithmeticIsPythons) {
  EXPECT_EQ(render("{{ 7 / 2 }} {{ 6 / 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7.5 % 2 }} {{ 2 ** 10 }}"),
            "3.5 2.0 3 -4 2 1.5 1024");
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 1 ~ 2 * 3 }} {{ true + 1 }}"), "7 64 4 16 2");
  EXPECT_EQ(render("{{ 'ab' * 2 }} {{ [1] + [2] }} {{ 'a' ~ none ~ 1.0 }}"), "abab [1, 2] aNone1.0");
}

TEST(JinjaExpressions, ComparisonsLogicAndInlineIf) {
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'ell' in 'hello' }} {{ 3 not in [1] }}"),
            "True False True True True");
  EXPECT_EQ(render("{{ '' or 'y' }} {{ 0 and 1 }} {{ not none }} {{ 'a' if false else 'b' }} [{{ 'a' if false }}]"),
            "y 0 True b []");
}

TEST(JinjaExpressions, AccessAndSlices) {
  const json vars = {{"d", {{"a", json::array({1, 2, 3})}, {"b", "x"}}}};
  EXPECT_EQ(render("{{ d.a[-1] }} {{ d['b'] }} {{ d.a[1:] }} {{ d.a[::-1] }} {{ 'héllo'[1:3] }} [{{ d.zz }}]", vars),
            "3 x [2, 3] [3, 2, 1] él []");
  EXPECT_EQ(render("{{ d.items() | list }} {{ d.get('zz', 0) }}", vars), "[('a', [1, 2, 3]), ('b', 'x')] 0");
}

TEST(JinjaStatements, LoopVariablesAndControl) {
  EXPECT_EQ(
      render("{% for x in 'abc' %}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"),
      "0TrueFalse3;1FalseFalse3;2FalseTrue3;");
  EXPECT_EQ(render("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}"
                   "{% endif %}{{ i }}{% endfor %}"),
            "013");
  EXPECT_EQ(render("{% for i in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for a in [1, 2] %}{% for b in [1, 2, 3] %}{% endfor %}{{ loop.index }}{% endfor %}"), "12");
}

TEST(JinjaStatements, SetInsideALoopDoesNotLeakButNamespaceDoes) {
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 5 %}{% endfor %}{{ x }}"), "111");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in [1, 2] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "3");
}

TEST(JinjaStatements, MacrosWithDefaultsAndKeywords) {
  EXPECT_EQ(render("{% macro g(who, greeting='Hello') %}{{ greeting }} {{ who }}{% endmacro %}"
                   "{{ g('A') }}/{{ g('B', 'Hi') }}/{{ g(greeting='Yo', who='C') }}"),
            "Hello A/Hi B/Yo C");
}

TEST(JinjaStatements, GenerationSpansAreByteOffsets) {
  ChatTemplate t(
      "A{% generation %}Bü{% endgeneration %}C{% for i in [1, 2] %}{% generation %}<{{ i }}>"
      "{% endgeneration %}{% endfor %}",
      "gen");
  const Rendered r = t.render({});
  EXPECT_EQ(r.text, "ABüC<1><2>");
  const std::vector<std::pair<size_t, size_t>> want = {{1, 4}, {5, 8}, {8, 11}};
  EXPECT_EQ(r.generation_spans, want);
}

TEST(JinjaFilters, Common) {
  const json vars = {
      {"people", json::parse(R"([{"name": "Bo", "age": 31}, {"name": "al", "age": 4, "admin": true}])")}};
  EXPECT_EQ(render("{{ people | map(attribute='name') | join(', ') }}", vars), "Bo, al");
  EXPECT_EQ(render("{{ people | selectattr('age', 'equalto', 4) | map(attribute='name') | first }}", vars), "al");
  EXPECT_EQ(render("{{ people | selectattr('admin', 'defined') | list | length }}", vars), "1");
  EXPECT_EQ(render("{{ people | rejectattr('admin') | map(attribute='age') | list }}", vars), "[31]");
  EXPECT_EQ(render("{{ '  x  ' | trim }}|{{ 'hello world' | title }}|{{ 'A' | lower }}|{{ x | default('d') }}"),
            "x|Hello World|a|d");
  EXPECT_EQ(render("{{ {'b': 1, 'A': 2} | dictsort }} {{ '12' | int + 1 }} {{ 5 | string }}"),
            "[('A', 2), ('b', 1)] 13 5");
  EXPECT_EQ(render("{{ {'a': 'é', 'b': [1.0]} | tojson }} {{ [1] | tojson(indent=2) }}"),
            "{\"a\": \"é\", \"b\": [1.0]} [\n  1\n]");
}

TEST(JinjaMethods, PythonStringMethods) {
  EXPECT_EQ(
      render("{{ ' a b '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ ' a  b\tc '.split() }}|{{ 'a,b,c'.split(',', 1) }}"),
      "a b|hi|['a', 'b', 'c']|['a', 'b,c']");
  EXPECT_EQ(render("{{ 'x</think>y'.split('</think>')[-1] }}|{{ 'hello'.startswith('he') }}|{{ 'Hi'.upper() }}"),
            "y|True|HI");
}

TEST(JinjaTests, TypesAndValues) {
  EXPECT_EQ(render("{{ 's' is string }}{{ 1 is number }}{{ true is number }}{{ none is none }}{{ {} is mapping }}"
                   "{{ [] is iterable }}{{ x is defined }}{{ x is undefined }}{{ 0 is false }}{{ false is false }}"),
            "TrueTrueTrueTrueTrueTrueFalseTrueFalseTrue");
  EXPECT_EQ(render("{{ none is not none }} {{ 9 is divisibleby 3 }} {{ 2 is equalto 2 }}"), "False True True");
}

TEST(JinjaErrors, SyntaxErrorsNameTheLineColumnAndText) {
  const std::string e = error_of("line one\n{% if true %}\n{{ 1 + }}\n{% endif %}");
  EXPECT_NE(e.find("chat template 'unit' line 3:"), std::string::npos) << e;
  EXPECT_NE(e.find("'}}'"), std::string::npos) << e;
  const std::string unclosed = error_of("{% for x in y %}x");
  EXPECT_NE(unclosed.find("endfor"), std::string::npos) << unclosed;
  const std::string string_error = error_of("{{ 'abc }}");
  EXPECT_NE(string_error.find("not closed"), std::string::npos) << string_error;
  EXPECT_NE(string_error.find("line 1:4"), std::string::npos) << string_error;
  const std::string tag = error_of("{% include 'x' %}");
  EXPECT_NE(tag.find("unknown tag 'include'"), std::string::npos) << tag;
}

TEST(JinjaErrors, UnknownFiltersAndTestsAreRefusedWhenParsing) {
  const std::string f = error_of("\n  {{ 'a' | no_such }}");
  EXPECT_NE(f.find("line 2:"), std::string::npos) << f;
  EXPECT_NE(f.find("no filter named 'no_such'"), std::string::npos) << f;
  EXPECT_NE(error_of("{{ 1 is frobbed }}").find("no test named 'frobbed'"), std::string::npos);
}

TEST(JinjaErrors, RuntimeErrorsNameThePlace) {
  const std::string m = error_of("{{ 'abc'.no_such_method() }}");
  EXPECT_NE(m.find("'str object' has no attribute 'no_such_method'"), std::string::npos) << m;
  EXPECT_NE(m.find("line 1:"), std::string::npos) << m;
  EXPECT_NE(error_of("{{ 1 + 'a' }}").find("unsupported operand type(s) for +: 'int' and 'str'"), std::string::npos);
  EXPECT_NE(error_of("{{ undefined_var.attr }}").find("'undefined_var' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace() %}{% set ns._x = 1 %}").find("underscore"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 // 0 }}").find("by zero"), std::string::npos);
}

}  // namespace
}  // namespace qtrain::engine::text
