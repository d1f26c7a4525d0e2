use super::*;

#[test]
fn filling_gives_the_bins_of_bin_value_by_value() {
    // Edges, their neighbours, infinities and a spread of values, more than one block.
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for (n, min, max) in [
        (100u32, 0.0f32, 1e5f32),
        (3, 3.0, 6.0),
        (800, -4.0, 4.0),
        (100, -0.05, 0.05),
        (6, 0.0, 6.0),
    ] {
        let mut values = vec![
            min,
            max,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            -f32::MAX,
            0.0,
            -0.0,
        ];
        values.extend(
            [min, max]
                .iter()
                .flat_map(|&e| [e.next_up(), e.next_down()]),
        );
        for _ in 0..1000 {
            let t = (next() >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
            values.push(min - 0.1 * (max - min) + 1.2 * (max - min) * t);
            values.push(f32::from_bits(next() as u32 & 0x7f7f_ffff)); // any finite magnitude
        }
        let mut h = Histogram::new("h", n, min, max).unwrap();
        h.fill(&values).unwrap();
        let mut want = vec![0u64; n as usize + 2];
        for &v in &values {
            want[h.bin(v).unwrap()] += 1;
        }
        assert_eq!(h.counts, want, "[{min}, {max}) in {n} bins");
    }
}
use arrow_array::{
    Float32Array, Float64Array, Int16Array, Int32Array, Int8Array, UInt16Array, UInt64Array,
    UInt8Array,
};

fn h(n: u32, min: f32, max: f32) -> Histogram {
    Histogram::new("h", n, min, max).unwrap()
}

#[test]
fn exactly_min_goes_to_first_bin_and_below_to_underflow() {
    let mut x = h(100, 1500.0, 2000.0);
    x.fill(&[1500.0, 1499.9999, f32::NEG_INFINITY, -0.0])
        .unwrap();
    assert_eq!(x.counts[0], 3);
    assert_eq!(x.counts[1], 1);
    // -0.0 equals 0.0: not below a minimum of 0.
    let mut z = h(10, 0.0, 1.0);
    z.fill(&[-0.0]).unwrap();
    assert_eq!(z.counts[1], 1);
}

#[test]
fn exactly_max_and_above_go_to_overflow() {
    let mut x = h(200, 5000.0, 25000.0);
    x.fill(&[25000.0, 1e30, f32::INFINITY]).unwrap();
    assert_eq!(x.counts[201], 3);
    assert_eq!(x.entries(), 3);
}

#[test]
fn just_below_max_rounding_up_is_folded_into_last_bin() {
    // (v − min)/(max − min)·n rounds to exactly n in f32 for the largest float below max.
    let (min, max, n) = (-3.15f32, 3.15f32, 100u32);
    let v = f32::from_bits(max.to_bits() - 1);
    assert!(v < max);
    let x_raw = (v - min) / (max - min) * n as f32;
    assert_eq!(x_raw, n as f32, "the case this test is about");
    let x = h(n, min, max);
    assert_eq!(x.bin(v), Some(n as usize));
    // 1 − ε/2 in [0, 1) with 10 bins: 9.9999995 → 10 after rounding? It stays below.
    let y = h(10, 0.0, 1.0);
    assert_eq!(y.bin(f32::from_bits(1.0f32.to_bits() - 1)), Some(10));
}

#[test]
fn inner_edges_follow_f32_arithmetic() {
    // 0.3 is not exact in f32: (0.3/1)·10 = 3.0000001 → bin index 3 → counter 4.
    let x = h(10, 0.0, 1.0);
    assert_eq!(x.bin(0.3), Some(4));
    // 0.7·10 in f32 = 7.0 (0.699999988·10 rounds to 7) → counter 8.
    assert_eq!(x.bin(0.7), Some(8));
    // Compare with the f32 formula written out.
    for v in [0.1f32, 0.2, 0.6, 0.9, 0.45, 0.55] {
        let i = ((v - 0.0) / (1.0 - 0.0) * 10.0) as usize;
        assert_eq!(x.bin(v), Some(i.min(9) + 1), "{v}");
    }
}

#[test]
fn integers_one_bin_low_as_in_the_reference() {
    // cluster_per_module_n (110 bins on [0, 110)): 1/110 rounds down in f32, so these
    // integers land one bin below their own; every other integer in its own bin.
    let x = h(110, 0.0, 110.0);
    let low: Vec<u32> = (0..110u32)
        .filter(|&v| x.bin(v as f32) != Some(v as usize + 1))
        .collect();
    assert_eq!(low, vec![1, 2, 4, 8, 16, 29, 32, 58, 64]);
    assert!(low.iter().all(|&v| x.bin(v as f32) == Some(v as usize)));
}

#[test]
fn nan_is_an_error_and_fills_nothing() {
    let mut x = h(10, 0.0, 1.0);
    let e = x.fill(&[0.5, f32::NAN, 0.5]).unwrap_err().to_string();
    assert_eq!(
        e,
        "histogram 'h': value #1 is NaN (the reference's histogram throws on NaN)"
    );
    assert_eq!(x.entries(), 0);
    let e = x
        .fill_array(&Float64Array::from(vec![0.1, f64::NAN]))
        .unwrap_err();
    assert!(matches!(e, ValidationError::NotANumber { index: 1, .. }));
    assert_eq!(x.entries(), 0);
    assert_eq!(x.bin(f32::NAN), None);
}

#[test]
fn negative_sizes_underflow() {
    let mut x = h(800, 0.0, 800.0);
    x.fill_array(&Int16Array::from(vec![-1, -800, 0, 8]))
        .unwrap();
    assert_eq!(x.counts[0], 2);
    assert_eq!(x.counts[1], 1);
    assert_eq!(x.counts[9], 1);
}

#[test]
fn every_numeric_type_is_converted_to_f32() {
    let mut x = h(10, 0.0, 10.0);
    x.fill_array(&Int8Array::from(vec![1i8])).unwrap();
    x.fill_array(&UInt8Array::from(vec![1u8])).unwrap();
    x.fill_array(&UInt16Array::from(vec![1u16])).unwrap();
    x.fill_array(&Int32Array::from(vec![1])).unwrap();
    x.fill_array(&arrow_array::Int64Array::from(vec![1i64]))
        .unwrap();
    x.fill_array(&arrow_array::UInt32Array::from(vec![1u32]))
        .unwrap();
    x.fill_array(&UInt64Array::from(vec![1u64])).unwrap();
    x.fill_array(&Float32Array::from(vec![1.0f32])).unwrap();
    x.fill_array(&Float64Array::from(vec![1.0f64])).unwrap();
    assert_eq!(x.counts[2], 9);
    // f64 → f32 rounding: 9.99999999 becomes 10.0f, which is the maximum: overflow.
    x.fill_array(&Float64Array::from(vec![9.99999999f64]))
        .unwrap();
    assert_eq!(x.counts[11], 1);
    // u32 → f32 rounding: 16777217 becomes 16777216.
    let mut y = Histogram::new("y", 2, 0.0, 16777217.0).unwrap();
    assert_eq!(y.max, 16777216.0);
    y.fill_array(&arrow_array::UInt32Array::from(vec![16777217u32]))
        .unwrap();
    assert_eq!(y.counts[3], 1);
    let nulls = Int32Array::from(vec![Some(1), None]);
    assert!(matches!(
        x.fill_array(&nulls),
        Err(ValidationError::Nulls { nulls: 1, .. })
    ));
}

#[test]
fn fill_where_selects_rows() {
    let mut x = h(3, 0.0, 3.0);
    x.fill_array_where(
        &Float32Array::from(vec![0.5, 1.5, 2.5]),
        &[true, false, true],
    )
    .unwrap();
    assert_eq!(x.counts, vec![0, 1, 0, 1, 0]);
    assert!(x
        .fill_array_where(&Float32Array::from(vec![0.5]), &[true, true])
        .is_err());
    let e = x
        .fill_array_where(
            &Float32Array::from(vec![f32::NAN, 0.5, f32::NAN]),
            &[false, true, true],
        )
        .unwrap_err();
    assert!(
        matches!(e, ValidationError::NotANumber { index: 2, .. }),
        "{e}"
    );
}

#[test]
fn bad_definitions_are_rejected() {
    assert!(Histogram::new("a", 0, 0.0, 1.0).is_err());
    assert!(Histogram::new("a", 1, 1.0, 1.0).is_err());
    assert!(Histogram::new("a", 1, 0.0, f32::INFINITY).is_err());
    assert!(Histogram::new("a", 1, -3e38, 3e38).is_err());
    let e = Histogram::new("a", 1, f32::NAN, 1.0)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "histogram 'a': limits [NaN, 1) must be finite with min < max"
    );
}

#[test]
fn add_is_exact_and_checks_binning() {
    let mut a = h(2, 0.0, 2.0);
    let mut b = h(2, 0.0, 2.0);
    a.fill(&[0.5]).unwrap();
    b.fill(&[1.5, 3.0]).unwrap();
    a.add(&b).unwrap();
    assert_eq!(a.counts, vec![0, 1, 1, 1]);
    assert!(a.add(&h(3, 0.0, 2.0)).is_err());
}

#[test]
fn edges() {
    let x = h(4, -1.0, 1.0);
    assert_eq!(x.edges(0), (f64::NEG_INFINITY, -1.0));
    assert_eq!(x.edges(1), (-1.0, -0.5));
    assert_eq!(x.edges(4), (0.5, 1.0));
    assert_eq!(x.edges(5), (1.0, f64::INFINITY));
}

#[test]
fn text_is_sorted_and_round_trips() {
    let mut b = Histogram::new("digi_n", 2, 0.0, 1e5).unwrap();
    b.fill(&[1.0, 6e4, 2e5]).unwrap();
    let mut a = Histogram::new("cluster_n", 1, 5000.0, 25000.0).unwrap();
    a.fill(&[0.0]).unwrap();
    let text = to_text(&[b.clone(), a.clone()]);
    assert_eq!(
        text,
        "cluster_n 3 5000 25000 1 0 0\ndigi_n 4 0 100000 0 1 1 1\n"
    );
    assert_eq!(parse_text(&text).unwrap(), vec![a, b]);
    assert!(parse_text("x 4 0 1 1 2 3")
        .unwrap_err()
        .to_string()
        .contains("size 4 but 3 counters"));
}

#[test]
fn parquet_round_trip_keeps_limits_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sub").join("histograms.parquet");
    let mut a = Histogram::new("track_phi", 100, -3.15, 3.15).unwrap();
    a.fill(&[-4.0, 0.0, 3.0, 3.2]).unwrap();
    let b = Histogram::new("hit_lex", 100, 0.0, 5e-5).unwrap();
    write_parquet(&p, &[a.clone(), b.clone()]).unwrap();
    assert_eq!(read_parquet(&p).unwrap(), vec![b, a.clone()]);
    let rb = to_record_batch(&[a]).unwrap();
    assert_eq!(rb.num_rows(), 102);
    assert_eq!(rb.schema().metadata()["quiver.schema"], "histograms");
    // No temporary file left behind.
    let names: Vec<_> = std::fs::read_dir(p.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("histograms.parquet")]);
}

#[test]
fn diff_reports_missing_binning_and_counts() {
    let mut a = h(2, 0.0, 2.0);
    a.name = "a".into();
    let mut same = Histogram::new("same", 1, 0.0, 1.0).unwrap();
    same.fill(&[0.5]).unwrap();
    let mut a2 = a.clone();
    a.fill(&[0.5, 1.5, 1.5]).unwrap();
    a2.fill(&[0.5, 0.5]).unwrap();
    let only = Histogram::new("only", 1, 0.0, 1.0).unwrap();
    let rebinned = Histogram::new("r", 2, 0.0, 1.0).unwrap();
    let rebinned2 = Histogram::new("r", 2, 0.0, 1.5).unwrap();
    let d = diff(&[a, same.clone(), only, rebinned], &[same, a2, rebinned2]);
    assert_eq!(d.identical, 1);
    assert_eq!(d.only_a, vec!["only"]);
    assert!(d.only_b.is_empty());
    assert_eq!(d.binning, vec!["r"]);
    assert_eq!(
        d.counts,
        vec![CountDiff {
            name: "a".into(),
            counters: 2,
            abs_sum: 3,
            entries_a: 3,
            entries_b: 2
        }]
    );
    assert!(d
        .render()
        .contains("a: 2 counters differ, sum |diff| 3, entries 3 vs 2"));
    let x = vec![h(3, 0.0, 1.0)];
    assert!(diff(&x, &x).is_identical());
}
