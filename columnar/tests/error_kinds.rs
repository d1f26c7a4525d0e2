//! The common failures are variants of `Error` with the names a caller acts on, so that
//! callers and tests match the kind and its fields instead of the message text.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::types::{Float32Type, Int32Type};
use arrow_array::{Float32Array, RecordBatch};
use quiver_columnar::columns::values;
use quiver_columnar::product::Product;
use quiver_columnar::toy::floats_schema;
use quiver_columnar::{
    Conditions, Error, EventBatch, ParamSpec, Params, PlanSpec, ProductKey, Registry,
};

fn floats() -> Product {
    let rb = RecordBatch::try_new(
        floats_schema(),
        vec![Arc::new(Float32Array::from(vec![1.0, 2.0]))],
    )
    .unwrap();
    Product::from_lengths(rb, [2]).unwrap()
}

#[test]
fn a_missing_or_mistyped_column_names_product_and_column() {
    let p = floats();
    let e = values::<Float32Type>(&p, "charge").unwrap_err();
    assert!(
        matches!(&e, Error::MissingColumn { product, column, available }
            if product == "floats" && column == "charge" && available == &["value"]),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "product 'floats' has no column 'charge' (columns: value)"
    );
    let e = values::<Int32Type>(&p, "value").unwrap_err();
    assert!(
        matches!(&e, Error::ColumnType { product, column, expected, found }
            if product == "floats" && column == "value" && expected == "Int32" && found == "Float32"),
        "{e:?}"
    );
}

#[test]
fn a_bad_parameter_names_step_key_and_value() {
    let specs = [
        ParamSpec::int("count", 1, "values per event").within(0.0, 100.0),
        ParamSpec::required("seed", quiver_columnar::ParamKind::Int, "seed"),
    ];
    let given = |k: &str, v: i64| BTreeMap::from([(k.to_string(), toml::Value::Integer(v))]);
    let mut g = given("count", 1000);
    g.insert("seed".into(), toml::Value::Integer(1));
    let e = Params::resolve("numbers", &specs, &g).unwrap_err();
    assert!(
        matches!(&e, Error::Param { step, key, value: Some(v), .. }
            if step == "numbers" && key == "count" && v == "1000"),
        "{e:?}"
    );
    assert!(e.is_plan_error());
    assert!(
        e.to_string().starts_with(
            "plan error: step 'numbers': parameter 'count' = 1000 is outside its valid range"
        ),
        "{e}"
    );
    let e = Params::resolve("numbers", &specs, &given("count", 3)).unwrap_err();
    assert!(
        matches!(&e, Error::Param { key, value: None, .. } if key == "seed"),
        "{e:?}"
    );
    let mut g = given("cuont", 3);
    g.insert("seed".into(), toml::Value::Integer(1));
    let e = Params::resolve("numbers", &specs, &g).unwrap_err();
    assert!(
        matches!(&e, Error::Param { key, .. } if key == "cuont"),
        "{e:?}"
    );
}

#[test]
fn a_plan_with_a_bad_parameter_is_a_plan_error_naming_the_key() {
    let text = "[[step]]\nlabel = \"numbers\"\ntype = \"random_floats\"\ncount = -1\n";
    let e = quiver_columnar::validate(
        &PlanSpec::from_toml(text, "test").unwrap(),
        &Registry::with_builtin(),
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::Param { step, key, .. } if step == "numbers" && key == "count"),
        "{e:?}"
    );
}

#[test]
fn a_missing_product_or_condition_is_named() {
    let batch = EventBatch::new(0, 1);
    let e = batch.get(&ProductKey::new("hits", "rechits")).unwrap_err();
    assert!(
        matches!(&e, Error::MissingProduct { product } if product == "rechits:hits"),
        "{e:?}"
    );
    let e = Conditions::new().get::<u32>().unwrap_err();
    assert!(
        matches!(&e, Error::MissingCondition { name, available } if name == "u32" && available.is_empty()),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("no condition 'u32' is loaded (available: none)"),
        "{e}"
    );
}

#[test]
fn a_damaged_or_changed_run_directory_is_named() {
    use quiver_columnar::rundir::{self, MANIFEST};
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join(MANIFEST), "format = 3\n").unwrap();
    let e = rundir::verify(tmp.path()).unwrap_err();
    assert!(
        matches!(&e, Error::DamagedManifest { path, .. } if path == &tmp.path().join(MANIFEST)),
        "{e:?}"
    );
    let staged = rundir::StagedRun::begin(&tmp.path().join("out")).unwrap();
    std::fs::write(staged.staging_dir().join("a.parquet"), b"rows").unwrap();
    let info = rundir::RunInfo {
        plan: "test".into(),
        plan_sha256: String::new(),
        first_event: 0,
        events: 1,
        input: None,
    };
    let out = staged.commit(&info).unwrap().dir;
    std::fs::write(out.join("a.parquet"), b"ROWS").unwrap();
    let e = rundir::verify(&out).unwrap_err();
    assert!(
        matches!(&e, Error::RunMismatch { path, .. } if path == &out.join("a.parquet")),
        "{e:?}"
    );
}
