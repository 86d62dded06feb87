//! Python's `json.dumps` over minijinja values: the `tojson` filter as Hugging Face transformers
//! defines it for chat templates.
//!
//! transformers replaces Jinja's `tojson` with `json.dumps(x, ensure_ascii=False, indent=indent,
//! separators=separators, sort_keys=sort_keys)`: separators `", "` and `": "` (`","` and `": "`
//! with an indent), non-ASCII kept, no HTML escaping of `<>&'`, floats written as Python's
//! `repr`. minijinja's builtin `tojson` differs on all of these, and tool schemas rendered into a
//! prompt must match the bytes the model was trained on.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// The options of `json.dumps` that chat templates use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DumpOptions {
    /// Escape every non-ASCII character as `\uXXXX`.
    pub ensure_ascii: bool,
    /// Pretty-print with this indent string (`indent=2` is two spaces).
    pub indent: Option<String>,
    /// Between items.
    pub item_separator: String,
    /// Between a key and its value.
    pub key_separator: String,
    /// Sort object keys.
    pub sort_keys: bool,
}

impl Default for DumpOptions {
    fn default() -> Self {
        DumpOptions { ensure_ascii: false, indent: None, item_separator: ", ".into(), key_separator: ": ".into(), sort_keys: false }
    }
}

fn invalid(msg: impl Into<std::borrow::Cow<'static, str>>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg)
}

/// The `tojson` filter: `tojson(ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`, positionally or by keyword, as in transformers.
pub(crate) fn tojson_filter(
    value: &Value,
    ensure_ascii: Option<bool>,
    indent: Option<Value>,
    separators: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    fn pick<T>(positional: Option<T>, kwargs: &Kwargs, name: &str) -> Result<Option<T>, Error>
    where
        T: for<'a> minijinja::value::ArgType<'a, Output = T>,
    {
        let keyword: Option<T> = kwargs.get(name)?;
        match (positional, keyword) {
            (Some(_), Some(_)) => Err(Error::new(ErrorKind::TooManyArguments, format!("tojson got multiple values for argument '{name}'"))),
            (p, k) => Ok(p.or(k)),
        }
    }
    let ensure_ascii = pick(ensure_ascii, &kwargs, "ensure_ascii")?.unwrap_or(false);
    let indent = pick(indent, &kwargs, "indent")?.filter(|v| !v.is_none() && !v.is_undefined());
    let separators = pick(separators, &kwargs, "separators")?.filter(|v| !v.is_none() && !v.is_undefined());
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    kwargs.assert_all_used()?;

    let indent = match indent {
        None => None,
        Some(v) if v.kind() == ValueKind::String => Some(v.as_str().unwrap_or_default().to_string()),
        Some(v) => match v.as_i64() {
            // Python: a negative or zero indent still inserts newlines, with no indentation.
            Some(n) => Some(" ".repeat(n.max(0) as usize)),
            None => return Err(invalid(format!("tojson: indent must be an integer or a string, not {}", v.kind()))),
        },
    };
    let (item_separator, key_separator) = match separators {
        Some(v) => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] if a.as_str().is_some() && b.as_str().is_some() => {
                    (a.as_str().unwrap_or_default().to_string(), b.as_str().unwrap_or_default().to_string())
                }
                _ => return Err(invalid("tojson: separators must be a pair of strings")),
            }
        }
        None if indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let opts = DumpOptions { ensure_ascii, indent, item_separator, key_separator, sort_keys };
    dumps(value, &opts).map(Value::from)
}

/// `json.dumps(value, ...)` with these options.
pub(crate) fn dumps(value: &Value, opts: &DumpOptions) -> Result<String, Error> {
    let mut out = String::new();
    write_value(&mut out, value, opts, 0)?;
    Ok(out)
}

fn write_value(out: &mut String, value: &Value, opts: &DumpOptions, level: usize) -> Result<(), Error> {
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(out, value)?,
        ValueKind::String => write_string(out, value.as_str().unwrap_or_default(), opts.ensure_ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_container(out, '[', ']', items.len(), opts, level, |out, i, level| write_value(out, &items[i], opts, level))?;
        }
        ValueKind::Map => {
            let mut entries = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                entries.push((key_string(&key)?, item));
            }
            if opts.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            write_container(out, '{', '}', entries.len(), opts, level, |out, i, level| {
                write_string(out, &entries[i].0, opts.ensure_ascii);
                out.push_str(&opts.key_separator);
                write_value(out, &entries[i].1, opts, level)
            })?;
        }
        kind => return Err(invalid(format!("tojson: object of type {kind} is not JSON serializable"))),
    }
    Ok(())
}

/// Python's `_iterencode_list` / `_iterencode_dict` layout.
fn write_container(
    out: &mut String,
    open: char,
    close: char,
    len: usize,
    opts: &DumpOptions,
    level: usize,
    mut item: impl FnMut(&mut String, usize, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if len == 0 {
        out.push(close);
        return Ok(());
    }
    let inner = level + 1;
    for i in 0..len {
        if i > 0 {
            out.push_str(&opts.item_separator);
        }
        if let Some(indent) = &opts.indent {
            out.push('\n');
            out.push_str(&indent.repeat(inner));
        }
        item(out, i, inner)?;
    }
    if let Some(indent) = &opts.indent {
        out.push('\n');
        out.push_str(&indent.repeat(level));
    }
    out.push(close);
    Ok(())
}

/// Object keys as Python's json module converts them.
fn key_string(key: &Value) -> Result<String, Error> {
    Ok(match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_string(),
        ValueKind::None => "null".to_string(),
        ValueKind::Bool => (if key.is_true() { "true" } else { "false" }).to_string(),
        ValueKind::Number => {
            let mut s = String::new();
            write_number(&mut s, key)?;
            s
        }
        kind => return Err(invalid(format!("tojson: keys must be str, int, float, bool or None, not {kind}"))),
    })
}

fn write_number(out: &mut String, value: &Value) -> Result<(), Error> {
    if value.is_integer() {
        let _ = write!(out, "{value}");
        return Ok(());
    }
    let f = f64::try_from(value.clone())?;
    out.push_str(&python_float_repr(f));
    Ok(())
}

/// `float.__repr__` as `json.dumps` writes it: the shortest round-trip digits, in positional
/// notation for decimal exponents -4..16 (with `.0` on whole numbers), else `1.5e-05` / `1e+16`.
pub(crate) fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    // Rust's `{:e}` gives the same shortest round-trip digits as Python's repr.
    let sci = format!("{f:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::from(sign);
    if !(-4..16).contains(&exponent) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exponent < 0 { '-' } else { '+' }, exponent.abs());
    } else if exponent < 0 {
        out.push_str("0.");
        out.push_str(&"0".repeat((-exponent - 1) as usize));
        out.push_str(&digits);
    } else {
        let point = exponent as usize + 1;
        if digits.len() > point {
            out.push_str(&digits[..point]);
            out.push('.');
            out.push_str(&digits[point..]);
        } else {
            out.push_str(&digits);
            out.push_str(&"0".repeat(point - digits.len()));
            out.push_str(".0");
        }
    }
    out
}

/// A JSON string literal as Python's encoder writes it (`ensure_ascii` or not).
fn write_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && !(' '..='~').contains(&c) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_follow_python_repr() {
        // Expected values: Python 3.11 `repr(float)`.
        let cases = [
            (0.5, "0.5"),
            (3.0, "3.0"),
            (-0.0, "-0.0"),
            (100.0, "100.0"),
            (1e-7, "1e-07"),
            (0.0001, "0.0001"),
            (0.00012345, "0.00012345"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e20, "1.5e+20"),
            (123456789.125, "123456789.125"),
            (0.1 + 0.2, "0.30000000000000004"),
            (-2.5e-300, "-2.5e-300"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for (f, want) in cases {
            assert_eq!(python_float_repr(f), want, "{f:?}");
        }
    }

    #[test]
    fn strings_escape_like_python() {
        let mut s = String::new();
        write_string(&mut s, "a\"b\\c\n\u{1}<&>é😀\u{7f}", false);
        assert_eq!(s, "\"a\\\"b\\\\c\\n\\u0001<&>é😀\u{7f}\"");
        s.clear();
        write_string(&mut s, "é😀\u{7f}", true);
        assert_eq!(s, "\"\\u00e9\\ud83d\\ude00\\u007f\"");
    }
}
