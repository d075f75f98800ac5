// Values of the chat-template engine: Python's float repr and str(), and tojson as
// json.dumps writes it (the expected strings are Python 3.11's outputs).
#include "engine/text/jinja_value.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "engine/text/jinja_tojson.h"

namespace qtrain::engine::text {
namespace {

using json = nlohmann::ordered_json;

TEST(JinjaValue, FloatReprIsPythons) {
  EXPECT_EQ(python_float_repr(1.0), "1.0");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(python_float_repr(1e-07), "1e-07");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(0.00001), "1e-05");
  EXPECT_EQ(python_float_repr(2.5e-05), "2.5e-05");
  EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1.5e16), "1.5e+16");
  EXPECT_EQ(python_float_repr(123456789.125), "123456789.125");
  EXPECT_EQ(python_float_repr(1e100), "1e+100");
  EXPECT_EQ(python_float_repr(-1.5e-10), "-1.5e-10");
  EXPECT_EQ(python_float_repr(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(python_float_repr(std::nan("")), "nan");
}

TEST(JinjaValue, StrAndReprArePythons) {
  EXPECT_EQ(Value::none().str(), "None");
  EXPECT_EQ(Value::boolean(true).str(), "True");
  EXPECT_EQ(Value().str(), "");
  EXPECT_EQ(Value::string("it's").repr(), "\"it's\"");
  EXPECT_EQ(Value::string("a\nb'\"").repr(), "'a\\nb\\'\"'");
  EXPECT_EQ(Value::tuple({Value::integer(1)}).str(), "(1,)");
  EXPECT_EQ(Value::from_json(json::parse(R"({"b": [1, 2.0, null, true], "a": "x"})")).str(),
            "{'b': [1, 2.0, None, True], 'a': 'x'}");
}

TEST(JinjaValue, TruthinessAndEqualityArePythons) {
  EXPECT_FALSE(Value().truthy());
  EXPECT_FALSE(Value::string("").truthy());
  EXPECT_FALSE(Value::floating(0.0).truthy());
  EXPECT_FALSE(Value::list().truthy());
  EXPECT_FALSE(Value::dict().truthy());
  EXPECT_TRUE(Value::namespace_object().truthy());
  EXPECT_TRUE(Value::string(" ").truthy());
  EXPECT_TRUE(Value::integer(1) == Value::floating(1.0));
  EXPECT_TRUE(Value::boolean(true) == Value::integer(1));
  EXPECT_FALSE(Value::string("1") == Value::integer(1));
  EXPECT_TRUE(Value::from_json(json::parse(R"({"a": 1, "b": 2})")) ==
              Value::from_json(json::parse(R"({"b": 2, "a": 1})")));
}

std::string dumps(const char* j, JsonDumpOptions o = {}) {
  return json_dumps(Value::from_json(json::parse(j)), o);
}

TEST(JinjaToJson, MatchesPythonJsonDumps) {
  // json.dumps(x, ensure_ascii=False): ", " and ": ", insertion order, non-ASCII kept.
  EXPECT_EQ(dumps(R"({"b": 1, "a": [1, 2.0, {"z": null}], "é": "ünï<>&\"'\\\n\t\u0001"})"),
            "{\"b\": 1, \"a\": [1, 2.0, {\"z\": null}], \"é\": \"ünï<>&\\\"'\\\\\\n\\t\\u0001\"}");
  EXPECT_EQ(dumps("[1.0, 1e-07, 1e16, 0.1, 2.5e-05, 1e22, 100.0, -0.0]"),
            "[1.0, 1e-07, 1e+16, 0.1, 2.5e-05, 1e+22, 100.0, -0.0]");
  EXPECT_EQ(dumps("[true, false, null, \"\", [], {}]"), "[true, false, null, \"\", [], {}]");
  EXPECT_EQ(dumps("\"\\u007f\\b\\f\\r\""), "\"\x7f\\b\\f\\r\"");
}

TEST(JinjaToJson, IndentSortKeysEnsureAscii) {
  JsonDumpOptions indent;
  indent.indent = "  ";
  // json.dumps({"a": [1, {}], "b": {}}, indent=2)
  EXPECT_EQ(dumps(R"({"a": [1, {}], "b": {"c": []}})", indent),
            "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": {\n    \"c\": []\n  }\n}");
  JsonDumpOptions sorted;
  sorted.sort_keys = true;
  EXPECT_EQ(dumps(R"({"b": 1, "a": 2, "é": 3, "B": 4})", sorted), R"({"B": 4, "a": 2, "b": 1, "é": 3})");
  JsonDumpOptions ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(dumps(R"("é😀\u007f")", ascii), R"("\u00e9\ud83d\ude00\u007f")");
  JsonDumpOptions compact;
  compact.separators = std::make_pair(std::string(","), std::string(":"));
  EXPECT_EQ(dumps(R"({"a": [1, 2]})", compact), R"({"a":[1,2]})");
}

TEST(JinjaToJson, UndefinedIsNotSerializable) {
  EXPECT_THROW(json_dumps(Value()), std::runtime_error);
}

}  // namespace
}  // namespace qtrain::engine::text
