//! The validation steps in a real plan: a test source publishes small pixel-chain products
//! (`calibrated_digis`, `clustered_digis`, `hits`) built from the event number, then
//! `histograms` and `count_validator` run on them through the framework's executor.

use std::path::Path;
use std::sync::Arc;

use arrow_array::{ArrayRef, Float32Array, Int16Array, Int32Array, RecordBatch, UInt16Array};
use arrow_schema::{DataType, Field};
use quiver_columnar::plan::PlanSpec;
use quiver_columnar::{
    executor, product_schema, Backend, EventBatch, JobContext, Product, Registry, Signature, Step,
    StepType,
};
use quiver_validation::hist::{parse_text, read_parquet, Histogram};

/// Event `e` has k = e % 3 + 1 modules, module j being 10·j + e % 2; each module has two
/// valid pixels and is followed by one invalid word. Pixel 1 of module j is in cluster
/// j % 2, so module j holds 1 + j % 2 clusters, each giving one hit.
struct Event {
    modules: Vec<u16>,
}

fn event(e: u64) -> Event {
    let k = (e % 3 + 1) as u16;
    Event {
        modules: (0..k).map(|j| 10 * j + (e % 2) as u16).collect(),
    }
}

impl Event {
    fn n_digis(&self) -> u32 {
        3 * self.modules.len() as u32
    }
    fn clusters(&self, j: usize) -> u32 {
        1 + (j % 2) as u32
    }
    fn n_clusters(&self) -> u32 {
        (0..self.modules.len()).map(|j| self.clusters(j)).sum()
    }
}

struct ChainSource;

fn u16s(v: Vec<u16>) -> ArrayRef {
    Arc::new(UInt16Array::from(v))
}
fn f32s(v: Vec<f32>) -> ArrayRef {
    Arc::new(Float32Array::from(v))
}

impl Step for ChainSource {
    fn process(&self, batch: &mut EventBatch) -> quiver_columnar::Result<()> {
        let (mut row, mut col, mut charge, mut module, mut cmodule) = (
            Vec::<u16>::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        );
        let mut cluster = Vec::<i32>::new();
        let (mut digi_len, mut hit_len) = (Vec::new(), Vec::new());
        let mut h: [Vec<f32>; 8] = Default::default();
        let (mut iphi, mut sx, mut sy) = (Vec::<i16>::new(), Vec::<i16>::new(), Vec::<i16>::new());
        let (mut hcharge, mut det) = (Vec::<i32>::new(), Vec::<u16>::new());
        for e in batch.events() {
            let ev = event(e);
            for (j, &m) in ev.modules.iter().enumerate() {
                for p in 0..2u16 {
                    row.push(p);
                    col.push(j as u16);
                    charge.push(1000 * (j as u16 + 1) + p);
                    module.push(m);
                    cmodule.push(m);
                    cluster.push(if p == 0 { 0 } else { (j % 2) as i32 });
                }
                row.push(0);
                col.push(0);
                charge.push(0);
                module.push(9999);
                cmodule.push(9999);
                cluster.push(-9999);
                for k in 0..ev.clusters(j) {
                    let x = 0.1 * j as f32 + 0.01 * k as f32;
                    for (i, v) in h.iter_mut().enumerate() {
                        v.push(x * (i + 1) as f32);
                    }
                    iphi.push(j as i16);
                    hcharge.push(5000 + 1000 * j as i32);
                    sx.push(if k == 0 { -8 } else { 16 });
                    sy.push(24);
                    det.push(m);
                }
            }
            digi_len.push(ev.n_digis() as usize);
            hit_len.push(ev.n_clusters() as usize);
        }
        let f16 = |n: &str| Field::new(n, DataType::UInt16, false);
        let cal = product_schema(
            "calibrated_digis",
            1,
            vec![f16("row"), f16("col"), f16("charge"), f16("module")],
        );
        let cal =
            RecordBatch::try_new(cal, vec![u16s(row), u16s(col), u16s(charge), u16s(module)])?;
        batch.put(Product::from_lengths(cal, digi_len.clone())?)?;
        let clu = product_schema(
            "clustered_digis",
            1,
            vec![f16("module"), Field::new("cluster", DataType::Int32, false)],
        );
        let clu = RecordBatch::try_new(
            clu,
            vec![u16s(cmodule), Arc::new(Int32Array::from(cluster))],
        )?;
        batch.put(Product::from_lengths(clu, digi_len)?)?;
        let names = [
            "x_local",
            "y_local",
            "xerr_local",
            "yerr_local",
            "x_global",
            "y_global",
            "z_global",
            "r_global",
        ];
        let mut fields: Vec<Field> = names
            .iter()
            .map(|n| Field::new(*n, DataType::Float32, false))
            .collect();
        fields.extend([
            Field::new("iphi", DataType::Int16, false),
            Field::new("charge", DataType::Int32, false),
            Field::new("size_x", DataType::Int16, false),
            Field::new("size_y", DataType::Int16, false),
            Field::new("det_index", DataType::UInt16, false),
        ]);
        let mut cols: Vec<ArrayRef> = h.into_iter().map(f32s).collect();
        cols.push(Arc::new(Int16Array::from(iphi)));
        cols.push(Arc::new(Int32Array::from(hcharge)));
        cols.push(Arc::new(Int16Array::from(sx)));
        cols.push(Arc::new(Int16Array::from(sy)));
        cols.push(u16s(det));
        let hits = RecordBatch::try_new(product_schema("hits", 1, fields), cols)?;
        batch.put(Product::from_lengths(hits, hit_len)?)
    }
}

fn registry() -> Registry {
    let mut r = Registry::with_builtin();
    quiver_validation::register(&mut r);
    r.add(StepType {
        name: "test_chain",
        doc: "test source of pixel-chain products",
        params: vec![],
        signature: Signature {
            inputs: vec![],
            outputs: vec![
                "calibrated_digis".into(),
                "clustered_digis".into(),
                "hits".into(),
            ],
        },
        backends: vec![Backend::Cpu],
        build: |_| Ok(Box::new(ChainSource)),
    });
    r
}

const EVENTS: u64 = 20;

/// Writes digicluster.bin with our counts, `bad` replacing the clusters of one event.
fn write_reference(dir: &Path, bad: Option<(u64, u32)>) {
    let mut bytes = Vec::new();
    for e in 0..EVENTS {
        let ev = event(e);
        let nc = match bad {
            Some((b, v)) if b == e => v,
            _ => ev.n_clusters(),
        };
        for v in [ev.modules.len() as u32, ev.n_digis(), nc] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
    }
    std::fs::write(dir.join("digicluster.bin"), bytes).unwrap();
}

fn run(
    plan: &str,
    out: &Path,
    threads: usize,
    batch_size: usize,
) -> quiver_columnar::Result<executor::Summary> {
    let r = registry();
    let spec = PlanSpec::from_toml(plan, "test").unwrap();
    let resolved = quiver_columnar::validate(&spec, &r)?;
    let job = JobContext {
        output: out.to_path_buf(),
        ..Default::default()
    };
    let steps = resolved.build(&r, Arc::new(job))?;
    executor::run(
        &resolved,
        &steps,
        &executor::RunOptions {
            threads,
            batch_size,
            first_event: 0,
            events: Some(EVENTS),
            progress: false,
            cycle_input: false,
        },
    )
}

fn plan(reference: &Path, strict: bool) -> String {
    format!(
        r#"
        [[step]]
        label = "chain"
        type = "test_chain"
        [[step]]
        label = "histos"
        type = "histograms"
        text = true
        [[step]]
        label = "counts"
        type = "count_validator"
        reference = "{}"
        strict = {strict}
        "#,
        reference.display()
    )
}

fn by_name(hs: &[Histogram], name: &str) -> Histogram {
    hs.iter()
        .find(|h| h.name == name)
        .unwrap_or_else(|| panic!("no histogram {name}"))
        .clone()
}

#[test]
fn histograms_and_counts_through_the_executor() {
    let refdir = tempfile::tempdir().unwrap();
    write_reference(refdir.path(), None);
    let out = tempfile::tempdir().unwrap();
    let summary = run(&plan(refdir.path(), true), out.path(), 2, 3).unwrap();
    let report = &summary
        .reports
        .iter()
        .find(|(l, _)| l == "counts")
        .unwrap()
        .1;
    assert_eq!(
        report,
        &format!("CountValidator: all {EVENTS} events passed validation\n")
    );

    let hs = read_parquet(&out.path().join("histograms.parquet")).unwrap();
    let text = std::fs::read_to_string(out.path().join("histograms.txt")).unwrap();
    assert_eq!(
        parse_text(&text).unwrap(),
        hs,
        "text and Parquet hold the same histograms"
    );
    // No tracks or vertices in this plan: the 17 digi/cluster/hit histograms, name order.
    let names: Vec<&str> = hs.iter().map(|h| h.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert_eq!(names.len(), 17);
    assert!(names
        .iter()
        .all(|n| !n.starts_with("track") && !n.starts_with("vertex")));
    assert!(
        text.lines().any(|l| l.starts_with("hit_lex 102 0 5e-05 ")),
        "{text}"
    );

    // Expected contents, from the event definition.
    let (mut digis, mut hits, mut modules_total) = (0u64, 0u64, 0u64);
    let (mut cpm_zero, mut cpm_one) = (0u64, 0u64);
    for e in 0..EVENTS {
        let ev = event(e);
        digis += ev.n_digis() as u64;
        hits += ev.n_clusters() as u64;
        modules_total += ev.modules.len() as u64;
        // clusInModule[0..nModules): only module 0 (present when e is even, 1 cluster) is non-zero.
        let k = ev.modules.len() as u64;
        if e % 2 == 0 {
            cpm_one += 1;
            cpm_zero += k - 1;
        } else {
            cpm_zero += k;
        }
    }
    let digi_n = by_name(&hs, "digi_n");
    assert_eq!((digi_n.counts[1], digi_n.entries()), (EVENTS, EVENTS));
    assert_eq!(
        by_name(&hs, "module_n").counts[0],
        EVENTS,
        "fewer than 1500 modules: underflow"
    );
    assert_eq!(by_name(&hs, "cluster_n").counts[0], EVENTS);
    assert_eq!(by_name(&hs, "hit_n").counts[0], EVENTS);
    let adc = by_name(&hs, "digi_adc");
    assert_eq!(adc.entries(), digis);
    assert_eq!(
        adc.counts[1],
        digis / 3,
        "invalid words have charge 0: first bin"
    );
    let cpm = by_name(&hs, "cluster_per_module_n");
    // In f32, (1 − 0)/110·110 = 0.99999994: the reference puts a module with 1 cluster in
    // the first bin, with the empty modules.
    assert_eq!(
        (cpm.counts[1], cpm.counts[2], cpm.entries()),
        (cpm_zero + cpm_one, 0, modules_total)
    );
    assert!(cpm_one > 0 && cpm_zero > 0);
    let sx = by_name(&hs, "hit_sizex");
    assert_eq!(sx.entries(), hits);
    assert_eq!(
        sx.counts[0], modules_total,
        "the first hit of every module has size −8: underflow"
    );
    assert_eq!(sx.counts[17], hits - modules_total);
    for name in [
        "hit_lx",
        "hit_ly",
        "hit_gx",
        "hit_gz",
        "hit_gr",
        "hit_charge",
        "hit_sizey",
        "hit_lex",
    ] {
        assert_eq!(by_name(&hs, name).entries(), hits, "{name}");
    }

    // The same files for any thread count and batch size.
    let out1 = tempfile::tempdir().unwrap();
    run(&plan(refdir.path(), true), out1.path(), 1, 1).unwrap();
    for f in ["histograms.parquet", "histograms.txt"] {
        assert_eq!(
            std::fs::read(out.path().join(f)).unwrap(),
            std::fs::read(out1.path().join(f)).unwrap(),
            "{f}"
        );
    }
    // Nothing else (no temporary files) in the output directory.
    let mut files: Vec<String> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(files, ["histograms.parquet", "histograms.txt"]);
}

#[test]
fn count_mismatch_fails_strict_jobs_and_is_reported_otherwise() {
    let refdir = tempfile::tempdir().unwrap();
    let wrong = event(13).n_clusters() + 5;
    write_reference(refdir.path(), Some((13, wrong)));
    let out = tempfile::tempdir().unwrap();
    let e = run(&plan(refdir.path(), true), out.path(), 2, 4)
        .unwrap_err()
        .to_string();
    let ours = event(13).n_clusters();
    assert!(
        e.contains(&format!("event 13: N(clusters) is {ours} expected {wrong}")),
        "{e}"
    );
    assert!(e.contains("step 'counts'"), "{e}");
    assert!(
        !out.path().join("histograms.parquet").exists(),
        "a failed job writes no histograms"
    );

    let s = run(&plan(refdir.path(), false), out.path(), 2, 4).unwrap();
    let report = &s.reports.iter().find(|(l, _)| l == "counts").unwrap().1;
    assert_eq!(
        report,
        &format!("Event 13\n N(clusters) is {ours} expected {wrong}\nCountValidator: 1 events failed validation (see details above)\n")
    );
}

#[test]
fn plan_errors_name_the_problem() {
    let out = tempfile::tempdir().unwrap();
    let e = run(
        &plan(Path::new("/nonexistent/counts"), true),
        out.path(),
        1,
        1,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("step 'counts'") && e.contains("parameter 'reference'"),
        "{e}"
    );
    let lonely = "[[step]]\nlabel = \"h\"\ntype = \"histograms\"\n";
    let e = run(lonely, out.path(), 1, 1).unwrap_err().to_string();
    assert!(e.contains("no histogram can be filled"), "{e}");
}

#[test]
fn catalogue_describes_the_steps() {
    let d = registry().describe();
    for needle in [
        "histograms  [cpu]",
        "count_validator  [cpu]",
        "input  calibrated_digis",
        "calibrated_digis (optional)  digi_n, digi_adc",
        "param  reference",
        "param  text",
    ] {
        assert!(d.contains(needle), "{needle} missing in:\n{d}");
    }
    println!("{d}");
}

#[test]
fn event_counts_serve_as_a_reference() {
    let out = tempfile::tempdir().unwrap();
    let plan1 = "[[step]]\nlabel = \"chain\"\ntype = \"test_chain\"\n[[step]]\nlabel = \"n\"\ntype = \"event_counts\"\nfile = \"mine\"\n";
    let s = run(plan1, out.path(), 2, 3).unwrap();
    assert!(
        s.reports[0].1.contains(&format!("{EVENTS} events -> ")),
        "{:?}",
        s.reports
    );
    let counts = out.path().join("mine.parquet");
    let t = quiver_validation::counts::read_reference(&counts).unwrap();
    assert_eq!(t.events.len(), EVENTS as usize);
    let e7 = event(7);
    let want = quiver_validation::counts::ReferenceCounts {
        n_modules: Some(e7.modules.len() as u32),
        n_digis: Some(e7.n_digis()),
        n_clusters: Some(e7.n_clusters()),
        n_tracks: None,
        n_vertices: None,
    };
    assert_eq!(t.events[&7], want);
    let out2 = tempfile::tempdir().unwrap();
    let s = run(&plan(&counts, true), out2.path(), 1, 7).unwrap();
    let report = &s.reports.iter().find(|(l, _)| l == "counts").unwrap().1;
    assert_eq!(
        report,
        &format!("CountValidator: all {EVENTS} events passed validation\n")
    );
}

#[test]
fn reference_count_files_need_every_count() {
    // The test chain gives digis and clusters only: the reference's tracks.bin cannot be
    // written, and the job says which count is missing.
    let out = tempfile::tempdir().unwrap();
    let plan1 = "[[step]]\nlabel = \"chain\"\ntype = \"test_chain\"\n[[step]]\nlabel = \"n\"\ntype = \"event_counts\"\nreference_files = true\n";
    let err = run(plan1, out.path(), 2, 3)
        .expect_err("the job must fail")
        .to_string();
    assert!(err.contains("no track count"), "{err}");
    assert!(!out.path().join("digicluster.bin").exists());
    assert!(
        out.path().join("counts.parquet").exists(),
        "the Parquet counts are still written"
    );
}

/// Device memory that cannot be read back: a download is counted and fails.
#[derive(Debug)]
struct Unreadable(std::sync::atomic::AtomicUsize);

impl quiver_columnar::residency::DeviceData for Unreadable {
    fn device(&self) -> &str {
        "fake:0"
    }
    fn nbytes(&self) -> usize {
        0
    }
    fn download(&self) -> quiver_columnar::Result<RecordBatch> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Err(quiver_columnar::Error::data("fake:0 cannot be read"))
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[test]
fn raw_digis_on_a_device_are_counted_without_a_download() {
    use quiver_validation::chain::{column, ChainKeys, Input};
    use quiver_validation::histograms::HistogramSet;
    // Raw digis that live only on a device (as the GPU raw_to_digis publishes them): nDigis
    // needs their rows per event alone.
    let data = Arc::new(Unreadable(Default::default()));
    let key = quiver_columnar::ProductKey::new("digis", "digis");
    let p = Product::on_device(
        quiver_reco::steps::schema("digis"),
        arrow_buffer::OffsetBuffer::from_lengths([3, 0, 40_000]),
        40_003,
        data.clone(),
    )
    .unwrap();
    let mut batch = EventBatch::new(0, 3);
    batch.set_allowed(std::slice::from_ref(&key));
    batch.put(p).unwrap();
    let keys = ChainKeys::from_keys([(Input::Digis, key)]);
    let products = keys.get(&batch).unwrap();
    let mut set = HistogramSet::for_inputs(|i| keys.has(i)).unwrap();
    set.fill_batch(&products).unwrap();
    let h = set.get("digi_n").unwrap();
    // [0, 1e5) in 100 bins: 3 and 0 in the first, 40 000 in bin 40.
    assert_eq!((h.counts[1], h.counts[41], h.entries()), (2, 1, 3));
    assert_eq!(
        quiver_validation::counts::batch_counts(&products)
            .unwrap()
            .n_digis,
        Some(vec![3, 0, 40_000])
    );
    assert_eq!(
        data.0.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no download"
    );
    // A column of it is a download; one that fails is an error naming the product, not a panic.
    let d = products.get(Input::Digis).unwrap();
    let err = column::<arrow_array::types::UInt16Type>(d, "adc")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("digis") && err.contains("cannot be read"),
        "{err}"
    );
}
