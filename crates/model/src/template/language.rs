//! The template language a tenant may use: minijinja's syntax (variables,
//! conditions, loops, macros) with nothing that builds a value larger than
//! what it was given. Fuel bounds the steps and the output cap the text, but
//! not the values in between: `{% set b = a ~ a %}` doubles a string in one
//! step, so thirty steps make gigabytes; a list of ten copies of a list of
//! ten copies ... costs a few steps and, written out, any size; a `{% set %}`
//! block collects output the cap never sees. Hence no `~ + * **`, no list,
//! map or tuple literals, no block `set`, `filter`, macros, includes; no function
//! but `range` (lazy, at most 100,000 numbers: loops are fuel's business;
//! `lipsum`, `namespace`, `dict` are gone), and only filters whose result is
//! no longer than a small multiple of their input, each result checked
//! against [`MAX_VALUE_BYTES`].

use std::borrow::Cow;

use minijinja::machinery::{tokenize, Token, WhitespaceConfig};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{StringInput, Value};
use minijinja::{filters, Environment, Error, ErrorKind, State};

/// The longest string a filter may return, in bytes: the longest body
/// (10,000 characters) escaped for HTML fits with room to spare.
pub const MAX_VALUE_BYTES: usize = 256 * 1024;

/// The filters a template may use. The rest of minijinja's (`join`,
/// `replace`, `format`, `indent`, `list`, `batch`, `tojson`, ...) can make
/// a value many times longer than its input.
pub const FILTERS: &[&str] = &[
    "abs",
    "bool",
    "capitalize",
    "count",
    "d",
    "default",
    "e",
    "escape",
    "first",
    "float",
    "int",
    "last",
    "length",
    "lower",
    "round",
    "safe",
    "string",
    "title",
    "trim",
    "upper",
];

/// Operators that join or repeat strings and lists.
fn builds_values(token: &Token) -> bool {
    matches!(token, Token::Tilde | Token::Plus | Token::Mul | Token::Pow)
}

/// Statements that collect output into a value outside the output cap
/// (`{% set x %}...{% endset %}`, `filter`, macros and their `caller`) or
/// pull in other templates.
const REFUSED_STATEMENTS: [&str; 8] = [
    "endset", "filter", "macro", "call", "include", "import", "from", "extends",
];

/// What a bracket opened: a call's or a subscript's arguments, where commas
/// separate arguments, or a grouping, where a comma would make a tuple.
#[derive(Clone, Copy, PartialEq)]
enum Opened {
    Arguments,
    Grouping,
}

/// A source that uses what the language leaves out: what, and on which
/// line. Syntax errors are left to the compiler, which names them better.
pub(super) fn check_source(source: &str) -> Result<(), String> {
    let tokens = tokenize(source, false, SyntaxConfig, WhitespaceConfig::default());
    let mut opened: Vec<Opened> = Vec::new();
    let mut previous: Option<Token> = None;
    for (token, span) in tokens.map_while(Result::ok) {
        let refuse = |what: String| {
            Err(format!(
                "uses {what} (line {}): templates may only write values side by side \
                 ({{{{ a }}}}{{{{ b }}}}); nothing that joins, repeats or collects them",
                span.start_line
            ))
        };
        // After a value, `(` is a call and `[` a subscript.
        let after_value = matches!(
            previous,
            Some(Token::Ident(_) | Token::Str(_) | Token::String(_))
                | Some(Token::ParenClose | Token::BracketClose)
        );
        match &token {
            t if builds_values(t) => return refuse(format!("{t}")),
            Token::Ident(name)
                if matches!(previous, Some(Token::BlockStart))
                    && REFUSED_STATEMENTS.contains(name) =>
            {
                return match *name {
                    "endset" => refuse("a {% set %} ... {% endset %} block".into()),
                    _ => refuse(format!("{{% {name} %}}")),
                };
            }
            Token::BraceOpen => return refuse("a map literal".into()),
            Token::BracketOpen if !after_value => return refuse("a list literal".into()),
            Token::BracketOpen => opened.push(Opened::Arguments),
            Token::ParenOpen if after_value => opened.push(Opened::Arguments),
            Token::ParenOpen => opened.push(Opened::Grouping),
            Token::ParenClose | Token::BracketClose => {
                opened.pop();
            }
            Token::Comma if opened.last() != Some(&Opened::Arguments) => {
                return refuse("a tuple".into());
            }
            _ => {}
        }
        previous = Some(token);
    }
    Ok(())
}

/// `env` limited to the language: `range` the only global, the [`FILTERS`]
/// only, those that make strings bounded by [`MAX_VALUE_BYTES`].
pub(super) fn restrict(env: &mut Environment<'static>) {
    let globals: Vec<String> = env.globals().map(|(name, _)| name.to_owned()).collect();
    for name in globals.iter().filter(|g| *g != "range") {
        env.remove_global(name);
    }
    for name in ALL_BUILTIN_FILTERS {
        if !FILTERS.contains(name) {
            env.remove_filter(name);
        }
    }
    env.add_filter("upper", |v: StringInput| bounded(filters::upper(v)));
    env.add_filter("lower", |v: StringInput| bounded(filters::lower(v)));
    env.add_filter("capitalize", |v: StringInput| {
        bounded(filters::capitalize(v))
    });
    env.add_filter("title", |v: Cow<str>| {
        bounded(Value::from(filters::title(v)))
    });
    env.add_filter("escape", escape);
    env.add_filter("e", escape);
    env.add_filter("safe", |v: String| bounded(filters::safe(v)));
    env.add_filter("string", |s: &State, v: &Value| {
        bounded(filters::string(s, v)?)
    });
}

fn escape(state: &State, v: &Value) -> Result<Value, Error> {
    bounded(filters::escape(state, v)?)
}

/// `v`, unless it is a string longer than [`MAX_VALUE_BYTES`].
fn bounded(v: Value) -> Result<Value, Error> {
    match v.as_str() {
        Some(s) if s.len() > MAX_VALUE_BYTES => {
            Err(Error::new(ErrorKind::InvalidOperation, VALUE_LIMIT))
        }
        _ => Ok(v),
    }
}

/// The detail of the error a filter returns past [`MAX_VALUE_BYTES`].
pub(super) const VALUE_LIMIT: &str = "value limit";

/// minijinja's built-in filters (2.24), to take out those not in [`FILTERS`].
pub(super) const ALL_BUILTIN_FILTERS: &[&str] = &[
    "safe",
    "escape",
    "e",
    "upper",
    "lower",
    "title",
    "capitalize",
    "replace",
    "length",
    "count",
    "dictsort",
    "items",
    "reverse",
    "trim",
    "join",
    "split",
    "lines",
    "default",
    "d",
    "round",
    "abs",
    "int",
    "float",
    "attr",
    "first",
    "last",
    "min",
    "max",
    "sort",
    "list",
    "string",
    "bool",
    "batch",
    "slice",
    "sum",
    "indent",
    "select",
    "selectattr",
    "reject",
    "rejectattr",
    "map",
    "groupby",
    "unique",
    "chain",
    "zip",
    "pprint",
    "format",
    "tojson",
    "urlencode",
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The backstop behind the filters kept: a string past the value limit
    /// is an error that reads as the limit, not a generic failure.
    #[test]
    fn a_value_past_the_limit_is_the_value_limit() {
        bounded(Value::from("x".repeat(MAX_VALUE_BYTES))).unwrap();
        let e = bounded(Value::from("x".repeat(MAX_VALUE_BYTES + 1))).unwrap_err();
        assert_eq!(
            super::super::limits::classify(&e),
            super::super::RenderError::TooBig
        );
    }
}
