//! Typed step parameters: declared with defaults, valid ranges and one-line docs, parsed
//! from TOML; unknown keys, wrong types, non-finite floats and values outside the declared
//! range rejected with the step's label, the key and the range (before any event: `quiver
//! plan check` resolves them).

use std::collections::BTreeMap;
use std::fmt;

use crate::error::{Error, Result};

/// The type of a parameter.
#[derive(Clone, Debug, PartialEq)]
pub enum ParamKind {
    Int,
    Float,
    Bool,
    Str,
    /// One of the listed strings.
    Choice(Vec<&'static str>),
    StrList,
}

impl fmt::Display for ParamKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamKind::Int => f.write_str("integer"),
            ParamKind::Float => f.write_str("float"),
            ParamKind::Bool => f.write_str("bool"),
            ParamKind::Str => f.write_str("string"),
            ParamKind::Choice(c) => write!(
                f,
                "one of {}",
                c.iter()
                    .map(|s| format!("\"{s}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            ParamKind::StrList => f.write_str("list of strings"),
        }
    }
}

/// A parameter value.
#[derive(Clone, Debug, PartialEq)]
pub enum ParamValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    StrList(Vec<String>),
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::Int(v) => write!(f, "{v}"),
            ParamValue::Float(v) => write!(f, "{v:?}"),
            ParamValue::Bool(v) => write!(f, "{v}"),
            ParamValue::Str(v) => write!(f, "\"{v}\""),
            ParamValue::StrList(v) => write!(
                f,
                "[{}]",
                v.iter()
                    .map(|s| format!("\"{s}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// The valid values of a numeric parameter: `min..=max`, or `min` excluded (`(min, max]`).
/// Float parameters must be finite whether or not they declare a range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ParamRange {
    pub min: f64,
    pub max: f64,
    pub min_excluded: bool,
}

impl ParamRange {
    /// Whether `v` is valid.
    pub fn contains(&self, v: f64) -> bool {
        (if self.min_excluded {
            v > self.min
        } else {
            v >= self.min
        }) && v <= self.max
    }
}

impl fmt::Display for ParamRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}, {}]",
            if self.min_excluded { "(" } else { "[" },
            self.min,
            self.max
        )
    }
}

/// Declaration of one parameter of a step type.
#[derive(Clone, Debug)]
pub struct ParamSpec {
    pub name: &'static str,
    pub kind: ParamKind,
    /// `None`: the parameter is required.
    pub default: Option<ParamValue>,
    /// One line, with units.
    pub doc: &'static str,
    /// Valid values of an integer or float parameter (`None`: any integer, any finite float).
    pub range: Option<ParamRange>,
}

impl ParamSpec {
    /// An integer parameter.
    pub fn int(name: &'static str, default: i64, doc: &'static str) -> Self {
        ParamSpec {
            name,
            kind: ParamKind::Int,
            default: Some(ParamValue::Int(default)),
            doc,
            range: None,
        }
    }
    /// A float parameter.
    pub fn float(name: &'static str, default: f64, doc: &'static str) -> Self {
        ParamSpec {
            name,
            kind: ParamKind::Float,
            default: Some(ParamValue::Float(default)),
            doc,
            range: None,
        }
    }
    /// A boolean parameter.
    pub fn bool(name: &'static str, default: bool, doc: &'static str) -> Self {
        ParamSpec {
            name,
            kind: ParamKind::Bool,
            default: Some(ParamValue::Bool(default)),
            doc,
            range: None,
        }
    }
    /// A string parameter.
    pub fn str(name: &'static str, default: &str, doc: &'static str) -> Self {
        ParamSpec {
            name,
            kind: ParamKind::Str,
            default: Some(ParamValue::Str(default.into())),
            doc,
            range: None,
        }
    }
    /// A string restricted to `choices`; the default is the first.
    pub fn choice(name: &'static str, choices: &[&'static str], doc: &'static str) -> Self {
        ParamSpec {
            name,
            kind: ParamKind::Choice(choices.to_vec()),
            default: Some(ParamValue::Str(choices[0].into())),
            doc,
            range: None,
        }
    }
    /// A required parameter of any kind.
    pub fn required(name: &'static str, kind: ParamKind, doc: &'static str) -> Self {
        ParamSpec {
            name,
            kind,
            default: None,
            doc,
            range: None,
        }
    }

    /// The same parameter with valid values `min..=max` (integers and floats).
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use quiver_columnar::params::{ParamSpec, Params};
    /// let specs = [ParamSpec::int("hits", 3, "hits per tuple").within(3.0, 4.0)];
    /// let given: BTreeMap<String, toml::Value> = toml::from_str("hits = 5").unwrap();
    /// let e = Params::resolve("tuples", &specs, &given).unwrap_err().to_string();
    /// assert!(e.contains("parameter 'hits' = 5 is outside its valid range [3, 4]"), "{e}");
    /// ```
    pub fn within(mut self, min: f64, max: f64) -> Self {
        self.range = Some(ParamRange {
            min,
            max,
            min_excluded: false,
        });
        self
    }
    /// The same parameter with valid values in `(min, max]` (e.g. a positive scale).
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use quiver_columnar::params::{ParamSpec, Params};
    /// let specs = [ParamSpec::float("ptmin", 0.9, "GeV").above(0.0, 1000.0)];
    /// for bad in ["ptmin = 0.0", "ptmin = -1.0", "ptmin = nan", "ptmin = inf", "ptmin = 1e308"] {
    ///     let given: BTreeMap<String, toml::Value> = toml::from_str(bad).unwrap();
    ///     let e = Params::resolve("ca", &specs, &given).unwrap_err().to_string();
    ///     assert!(e.contains("'ptmin'") && e.contains("(0, 1000]"), "{e}");
    /// }
    /// ```
    pub fn above(mut self, min: f64, max: f64) -> Self {
        self.range = Some(ParamRange {
            min,
            max,
            min_excluded: true,
        });
        self
    }

    /// A refusal of this parameter of step `label`.
    fn bad(&self, label: &str, value: Option<String>, msg: String) -> Error {
        Error::Param {
            step: label.to_string(),
            key: self.name.to_string(),
            value,
            msg,
        }
    }

    /// Checks a converted value against finiteness and the declared range.
    fn check(&self, label: &str, v: ParamValue) -> Result<ParamValue> {
        let x = match v {
            ParamValue::Int(i) => i as f64,
            ParamValue::Float(x) => x,
            _ => return Ok(v),
        };
        let range = self.range.map(|r| format!(" in {r}")).unwrap_or_default();
        if !x.is_finite() {
            return Err(self.bad(
                label,
                Some(v.to_string()),
                format!(
                    "parameter '{}' must be a finite number{range}, got {v}",
                    self.name
                ),
            ));
        }
        match self.range {
            Some(r) if !r.contains(x) => Err(self.bad(
                label,
                Some(v.to_string()),
                format!(
                    "parameter '{}' = {v} is outside its valid range {r} ({})",
                    self.name, self.doc
                ),
            )),
            _ => Ok(v),
        }
    }

    /// Converts a TOML value, or says why not.
    fn convert(&self, label: &str, v: &toml::Value) -> Result<ParamValue> {
        let wrong = || {
            self.bad(
                label,
                Some(v.to_string()),
                format!(
                    "parameter '{}' must be {}, got {} ({})",
                    self.name,
                    self.kind,
                    v,
                    v.type_str()
                ),
            )
        };
        Ok(match (&self.kind, v) {
            (ParamKind::Int, toml::Value::Integer(i)) => ParamValue::Int(*i),
            (ParamKind::Float, toml::Value::Float(x)) => ParamValue::Float(*x),
            (ParamKind::Float, toml::Value::Integer(i)) => ParamValue::Float(*i as f64),
            (ParamKind::Bool, toml::Value::Boolean(b)) => ParamValue::Bool(*b),
            (ParamKind::Str, toml::Value::String(s)) => ParamValue::Str(s.clone()),
            (ParamKind::Choice(c), toml::Value::String(s)) => {
                if !c.contains(&s.as_str()) {
                    return Err(self.bad(
                        label,
                        Some(v.to_string()),
                        format!("parameter '{}' = \"{s}\" is not {}", self.name, self.kind),
                    ));
                }
                ParamValue::Str(s.clone())
            }
            (ParamKind::StrList, toml::Value::Array(a)) => ParamValue::StrList(
                a.iter()
                    .map(|x| x.as_str().map(str::to_string).ok_or_else(wrong))
                    .collect::<Result<_>>()?,
            ),
            _ => return Err(wrong()),
        })
    }
}

/// Resolved parameters of one step: every declared parameter has a value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Params {
    values: BTreeMap<String, ParamValue>,
}

impl Params {
    /// Parses `given` against `specs`: unknown keys, wrong types and missing required
    /// parameters are errors naming `label` and the key.
    pub fn resolve(
        label: &str,
        specs: &[ParamSpec],
        given: &BTreeMap<String, toml::Value>,
    ) -> Result<Params> {
        let mut values = BTreeMap::new();
        for (key, v) in given {
            let spec = specs.iter().find(|s| s.name == key).ok_or_else(|| {
                let known = specs.iter().map(|s| s.name).collect::<Vec<_>>();
                Error::Param {
                    step: label.to_string(),
                    key: key.clone(),
                    value: Some(v.to_string()),
                    msg: if known.is_empty() {
                        format!("unknown parameter '{key}' (this step type has no parameters)")
                    } else {
                        format!("unknown parameter '{key}' (known: {})", known.join(", "))
                    },
                }
            })?;
            let value = spec.convert(label, v)?;
            values.insert(key.clone(), spec.check(label, value)?);
        }
        for s in specs {
            if !values.contains_key(s.name) {
                let d = s.default.clone().ok_or_else(|| {
                    s.bad(
                        label,
                        None,
                        format!("missing required parameter '{}' ({})", s.name, s.kind),
                    )
                })?;
                values.insert(s.name.to_string(), d);
            }
        }
        Ok(Params { values })
    }

    /// Parameters built in code (Python plans, tests), checked like TOML ones.
    pub fn from_values(
        label: &str,
        specs: &[ParamSpec],
        given: impl IntoIterator<Item = (String, toml::Value)>,
    ) -> Result<Params> {
        Self::resolve(label, specs, &given.into_iter().collect())
    }

    /// All values, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &ParamValue)> {
        self.values.iter()
    }
    /// A value by name.
    pub fn get(&self, name: &str) -> Option<&ParamValue> {
        self.values.get(name)
    }
    /// An integer parameter (panics only if the step declared it with another kind).
    pub fn int(&self, name: &str) -> i64 {
        match self.values.get(name) {
            Some(ParamValue::Int(v)) => *v,
            other => panic!("step declared no integer parameter '{name}' (found {other:?})"),
        }
    }
    /// A float parameter.
    pub fn float(&self, name: &str) -> f64 {
        match self.values.get(name) {
            Some(ParamValue::Float(v)) => *v,
            other => panic!("step declared no float parameter '{name}' (found {other:?})"),
        }
    }
    /// A boolean parameter.
    pub fn bool(&self, name: &str) -> bool {
        match self.values.get(name) {
            Some(ParamValue::Bool(v)) => *v,
            other => panic!("step declared no bool parameter '{name}' (found {other:?})"),
        }
    }
    /// A string (or choice) parameter.
    pub fn str(&self, name: &str) -> &str {
        match self.values.get(name) {
            Some(ParamValue::Str(v)) => v,
            other => panic!("step declared no string parameter '{name}' (found {other:?})"),
        }
    }
    /// A list-of-strings parameter.
    pub fn str_list(&self, name: &str) -> &[String] {
        match self.values.get(name) {
            Some(ParamValue::StrList(v)) => v,
            other => panic!("step declared no list parameter '{name}' (found {other:?})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs() -> Vec<ParamSpec> {
        vec![
            ParamSpec::int("count", 10, "values per event"),
            ParamSpec::float("tolerance", 0.0, "absolute"),
            ParamSpec::choice("method", &["multiply", "powi"], "how"),
        ]
    }

    fn table(s: &str) -> BTreeMap<String, toml::Value> {
        toml::from_str(s).unwrap()
    }

    #[test]
    fn defaults_and_conversion() {
        let p = Params::resolve("x", &specs(), &table("tolerance = 1")).unwrap();
        assert_eq!(p.int("count"), 10);
        assert_eq!(p.float("tolerance"), 1.0);
        assert_eq!(p.str("method"), "multiply");
    }

    #[test]
    fn errors_name_label_and_key() {
        let e = Params::resolve("sq", &specs(), &table("colour = 1"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "plan error: step 'sq': unknown parameter 'colour' (known: count, tolerance, method)"
        );
        let e = Params::resolve("sq", &specs(), &table("count = \"many\""))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "plan error: step 'sq': parameter 'count' must be integer, got \"many\" (string)"
        );
        let e = Params::resolve("sq", &specs(), &table("method = \"cube\""))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "plan error: step 'sq': parameter 'method' = \"cube\" is not one of \"multiply\", \"powi\"");
        let req = vec![ParamSpec::required("path", ParamKind::Str, "file")];
        let e = Params::resolve("w", &req, &BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "plan error: step 'w': missing required parameter 'path' (string)"
        );
    }
}
