//! Every numeric parameter of every registered step type (CPU and GPU) is checked before any
//! event: non-finite floats and values outside the declared range are rejected by plan
//! validation with a message naming the step, the key and the valid range; a parameter
//! without a range must be listed here with the reason every value of it is meaningful.
//! Also the hostile parameter cases, through `quiver plan check` on the default plan.

use std::collections::BTreeMap;

use quiver_columnar::{ParamKind, ParamValue, Params};

/// (step type, parameter, why every finite value is meaningful).
const ANY_VALUE: &[(&str, &str, &str)] = &[
    ("random_floats", "seed", "any integer is a seed"),
    (
        "random_floats",
        "low",
        "any finite lower bound (high must exceed it: a plan check)",
    ),
    ("random_floats", "high", "any finite upper bound"),
];

fn toml_value(text: &str) -> toml::Value {
    let t: BTreeMap<String, toml::Value> = toml::from_str(&format!("v = {text}")).unwrap();
    t["v"].clone()
}

#[test]
fn every_numeric_parameter_has_a_range_and_rejects_nonsense() {
    let registry = quiver::registry();
    let mut checked = 0;
    for t in registry.iter() {
        for p in t
            .params
            .iter()
            .filter(|p| matches!(p.kind, ParamKind::Int | ParamKind::Float))
        {
            let listed = ANY_VALUE
                .iter()
                .any(|(ty, name, _)| *ty == t.name && *name == p.name);
            let range = match (p.range, listed) {
                (Some(r), false) => Some(r),
                (None, true) => None,
                (Some(_), true) => panic!("{}.{} has a range and is listed as any-value", t.name, p.name),
                (None, false) => panic!("{}.{}: declare its valid range (ParamSpec::within/above) or list it in ANY_VALUE", t.name, p.name),
            };
            // The default is valid.
            let resolved = Params::resolve("s", &t.params, &BTreeMap::new()).unwrap();
            let d = match resolved.get(p.name) {
                Some(ParamValue::Int(i)) => *i as f64,
                Some(ParamValue::Float(x)) => *x,
                other => panic!("{}.{} default {other:?}", t.name, p.name),
            };
            assert!(
                range.is_none_or(|r| r.contains(d)),
                "{}.{}: default {d} outside {range:?}",
                t.name,
                p.name
            );
            let bad: &[&str] = match p.kind {
                ParamKind::Int => &["-1", "-9223372036854775808", "9223372036854775807"],
                _ => &["nan", "inf", "-inf", "-1.0", "1e308", "-1e308"],
            };
            for text in bad {
                let given = BTreeMap::from([(p.name.to_string(), toml_value(text))]);
                let x: f64 = text.parse().unwrap();
                let valid = x.is_finite() && range.is_none_or(|r| r.contains(x));
                match Params::resolve("the_step", &t.params, &given) {
                    Ok(_) => assert!(
                        valid,
                        "{}.{} = {text} accepted outside {range:?}",
                        t.name, p.name
                    ),
                    Err(e) => {
                        let e = e.to_string();
                        assert!(
                            !valid,
                            "{}.{} = {text} rejected although valid: {e}",
                            t.name, p.name
                        );
                        assert!(
                            e.contains("step 'the_step'") && e.contains(&format!("'{}'", p.name)),
                            "{e}"
                        );
                        if let Some(r) = range {
                            assert!(
                                e.contains(&r.to_string()),
                                "{}.{} = {text}: the message must give the range {r}: {e}",
                                t.name,
                                p.name
                            );
                        }
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(
        checked > 60,
        "only {checked} values checked: is the registry complete?"
    );
}

fn plan_check(edit: &str, value: &str) -> String {
    let plan = include_str!("../../plans/pixel.toml");
    let (section, key) = edit.split_once('.').unwrap();
    // Insert `key = value` after the step's `type = "section"` line.
    let anchor = format!("type = \"{section}\"\n");
    assert!(plan.contains(&anchor), "{anchor}");
    let text = plan.replacen(&anchor, &format!("{anchor}{key} = {value}\n"), 1);
    let spec = quiver_columnar::plan::PlanSpec::from_toml(&text, "pixel").unwrap();
    match quiver_columnar::validate(&spec, &quiver::registry()) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn issue_16_parameter_cases_fail_before_any_event() {
    for v in ["nan", "inf", "1e308", "-1.0", "0.0"] {
        let e = plan_check("ca_ntuplets.ptmin", v);
        assert!(
            e.contains("'ptmin'") && e.contains("(0, 1000]"),
            "ptmin = {v}: {e}"
        );
    }
    for key in ["gain", "gain_l1"] {
        for v in ["nan", "0.0", "-47.0"] {
            let e = plan_check(&format!("calibrate.{key}"), v);
            assert!(
                e.contains(&format!("'{key}'")) && e.contains("(0, 10000]"),
                "{key} = {v}: {e}"
            );
        }
    }
    for key in ["min_t", "min_hits"] {
        let e = plan_check(&format!("vertices.{key}"), "-1");
        assert!(
            e.contains(&format!("'{key}' = -1 is outside its valid range")),
            "{e}"
        );
    }
    for v in ["5", "100", "2"] {
        let e = plan_check("ca_doublets.min_hits_per_ntuplet", v);
        assert!(
            e.contains("'min_hits_per_ntuplet'") && e.contains("[3, 4]"),
            "{v}: {e}"
        );
    }
    // Valid on each side, but the two steps disagree.
    let e = plan_check("ca_doublets.min_hits_per_ntuplet", "4");
    assert!(e.contains("parameter 'min_hits_per_ntuplet' = 3 differs from the 4 of step 'doublets' (ca_doublets)"), "{e}");
    assert_eq!(
        plan_check("ca_ntuplets.ptmin", "0.5"),
        "",
        "a valid value passes"
    );
}
