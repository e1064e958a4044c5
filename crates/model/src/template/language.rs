//! The template language a tenant may use: minijinja's syntax (variables,
//! conditions, loops, macros) with nothing that builds a value larger than
//! what it was given. Fuel bounds the steps and the output cap the text, but
//! not the values in between: `{% set b = a ~ a %}` doubles a string in one
//! step, so thirty steps make gigabytes; a list of ten copies of a list of
//! ten copies ... costs a few steps and, written out, any size; a `{% set %}`
//! block collects output the cap never sees. Hence no `~ + * **`, no list,
//! map or tuple literals, no block `set`, `filter`, macros, includes; no function
//! but `range` (lazy, at most [`MAX_RANGE`] numbers; `lipsum`, `namespace`,
//! `dict` are gone), and only filters whose result is no longer than a small
//! multiple of their input, each result checked against [`MAX_VALUE_BYTES`].
//!
//! Work inside one instruction is charged to the render's meter (meter.rs):
//! every number a range gives (to a loop, `in`, `|last`, a comparison, its
//! text), and the bytes every filter reads.

use std::borrow::Cow;
use std::sync::Arc;

use minijinja::machinery::{tokenize, Token, WhitespaceConfig};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Enumerator, Object, ObjectRepr, Rest, StringInput, Value};
use minijinja::{filters, Environment, Error, ErrorKind, State};

use super::meter;

/// The most numbers `range` gives: a reminder has no use for more, and
/// each one walked is charged anyway.
pub const MAX_RANGE: usize = 10_000;

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
/// only, those that make strings bounded by [`MAX_VALUE_BYTES`], and every
/// one of them charged for what it reads.
pub(super) fn restrict(env: &mut Environment<'static>) {
    let globals: Vec<String> = env.globals().map(|(name, _)| name.to_owned()).collect();
    for name in &globals {
        env.remove_global(name);
    }
    env.add_function("range", range);
    for name in ALL_BUILTIN_FILTERS {
        if !FILTERS.contains(name) {
            env.remove_filter(name);
        }
    }
    add_string_filters(env);
    add_value_filters(env);
}

/// The filters that make strings: charged for their input, their result
/// checked against [`MAX_VALUE_BYTES`].
fn add_string_filters(env: &mut Environment<'static>) {
    env.add_filter("upper", |v: StringInput| {
        read(v.as_str().len())?;
        bounded(filters::upper(v))
    });
    env.add_filter("lower", |v: StringInput| {
        read(v.as_str().len())?;
        bounded(filters::lower(v))
    });
    env.add_filter("capitalize", |v: StringInput| {
        read(v.as_str().len())?;
        bounded(filters::capitalize(v))
    });
    env.add_filter("title", |v: Cow<str>| {
        read(v.len())?;
        bounded(Value::from(filters::title(v)))
    });
    env.add_filter("trim", |v: StringInput, chars: Option<Cow<str>>| {
        read(v.as_str().len() * (1 + chars.as_ref().map_or(0, |c| c.len())))?;
        bounded(filters::trim(v, chars))
    });
    env.add_filter("escape", escape);
    env.add_filter("e", escape);
    env.add_filter("safe", |v: String| {
        read(v.len())?;
        bounded(filters::safe(v))
    });
    env.add_filter("string", |s: &State, v: &Value| {
        read_value(v)?;
        walked(filters::string(s, v)).and_then(bounded)
    });
}

/// The filters that look at a value: charged for what they read (a string's
/// bytes; a range's numbers are charged as they are walked).
fn add_value_filters(env: &mut Environment<'static>) {
    env.add_filter("length", length);
    env.add_filter("count", length);
    env.add_filter("first", |v: &Value| {
        read_value(v)?;
        walked(filters::first(v))
    });
    env.add_filter("last", |v: Value| {
        read_value(&v)?;
        walked(filters::last(v))
    });
    env.add_filter("default", default);
    env.add_filter("d", default);
    env.add_filter("bool", |s: &State, v: &Value| {
        read_value(v)?;
        filters::bool(s, v)
    });
    env.add_filter("int", |s: &State, v: &Value| {
        read_value(v)?;
        filters::int(s, v)
    });
    env.add_filter("float", |s: &State, v: &Value| {
        read_value(v)?;
        filters::float(s, v)
    });
    env.add_filter("abs", |v: Value| {
        read_value(&v)?;
        filters::abs(v)
    });
    env.add_filter("round", |v: Value, precision: Option<i32>| {
        read_value(&v)?;
        filters::round(v, precision)
    });
}

fn length(v: &Value) -> Result<usize, Error> {
    read_value(v)?;
    walked(filters::length(v))
}

fn default(s: &State, v: &Value, args: Rest<Value>) -> Result<Value, Error> {
    read_value(v)?;
    filters::default(s, v, args)
}

fn escape(state: &State, v: &Value) -> Result<Value, Error> {
    read_value(v)?;
    walked(filters::escape(state, v)).and_then(bounded)
}

/// Charges reading `bytes` bytes; past the budget, the budget's error.
fn read(bytes: usize) -> Result<(), Error> {
    match meter::charge_bytes(bytes) {
        true => Ok(()),
        false => Err(over_budget()),
    }
}

/// Charges reading `v`: its bytes if a string, else a unit (a range's
/// numbers are charged as the filter walks them).
fn read_value(v: &Value) -> Result<(), Error> {
    read(v.as_str().map_or(0, str::len))
}

/// `result`, unless the walk inside it went past the budget.
fn walked<T>(result: Result<T, Error>) -> Result<T, Error> {
    match meter::overrun() {
        Some(_) => Err(over_budget()),
        None => result,
    }
}

fn over_budget() -> Error {
    Error::new(ErrorKind::InvalidOperation, OVER_BUDGET)
}

/// The detail of the error a hook returns once the render is over its
/// budget (the meter says which limit).
pub(super) const OVER_BUDGET: &str = "render budget";

/// `range(stop)`, `range(start, stop)`, `range(start, stop, step)`: at most
/// [`MAX_RANGE`] numbers, each charged as it is walked.
fn range(lower: i64, upper: Option<i64>, step: Option<i64>) -> Result<Value, Error> {
    let (start, stop) = match upper {
        Some(upper) => (lower, upper),
        None => (0, lower),
    };
    let step = step.unwrap_or(1);
    if step == 0 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "cannot create range with step of 0",
        ));
    }
    let span = i128::from(stop) - i128::from(start);
    let step_size = i128::from(step).abs();
    let len = match (span > 0, step > 0) {
        (true, true) => (span + step_size - 1) / step_size,
        (false, false) if span < 0 => (-span + step_size - 1) / step_size,
        _ => 0,
    };
    if len > MAX_RANGE as i128 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("range has more than {MAX_RANGE} numbers"),
        ));
    }
    Ok(Value::from_object(Range {
        start,
        step,
        len: len as usize,
    }))
}

/// A range's numbers, made as they are walked.
#[derive(Debug)]
struct Range {
    start: i64,
    step: i64,
    len: usize,
}

impl Range {
    /// The `i`th number (`i` < len, so it lies between the ends: no overflow).
    fn nth(&self, i: usize) -> Value {
        Value::from(i128::from(self.start) + i128::from(self.step) * i as i128)
    }
}

impl Object for Range {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let i = key.as_usize().filter(|i| *i < self.len)?;
        meter::charge(1);
        Some(self.nth(i))
    }

    /// Each number charged; once the render is over its budget the walk
    /// ends (the render then fails, so the shortened walk is never used).
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        let me = self.clone();
        Enumerator::Iter(Box::new(
            (0..self.len).map_while(move |i| meter::charge(1).then(|| me.nth(i))),
        ))
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        Some(self.len)
    }
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
