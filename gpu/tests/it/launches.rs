//! Every launch in the GPU steps names its arguments, and at run time
//! `kernels::check_launch` compares them, names and types, with the kernel's signature in
//! `gpu/kernels/*.cu`. The local-reconstruction kernels take their list from
//! `quiver_gpu::args` (checked by that module's tests, and run by the emulation); the others
//! list them at the launch (`Launch::arg(param, value)`). Without a GPU no launch runs, so
//! this reads the steps' launch code as written and checks each of those lists' names
//! against the signature: a misordered argument in a step fails here, on any machine.

use quiver_gpu::kernels::{self, check_launch, signature};
use quiver_gpu::GpuError;

/// A launch as written in a step's source: the kernels it may launch (a literal, or the
/// candidates a variable chooses between) and its parameter names in order.
#[derive(Debug)]
struct Written {
    file: String,
    line: usize,
    kernels: Vec<String>,
    params: Vec<String>,
}

/// String literals in `s`, in order (the steps' launch code has no escaped quotes).
fn literals(s: &str) -> Vec<&str> {
    s.split('"').skip(1).step_by(2).collect()
}

fn is_kernel(name: &str) -> bool {
    kernels::SOURCES.iter().any(|m| m.2.contains(&name))
}

/// Every `Launch::new(..)` .. `.launch(` span of the steps' sources.
fn written_launches() -> Vec<Written> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/steps");
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut at = 0;
        while let Some(k) = text[at..].find("Launch::new(") {
            let start = at + k;
            let head_end = start + text[start..].find(')').unwrap();
            let end = head_end + text[head_end..].find(".launch(").unwrap();
            let head = &text[start..head_end];
            // `steps::launch_as`: the lists of `args`, checked by that module's tests.
            if file == "mod.rs" && head == "Launch::new(run, kernel" {
                at = head_end;
                continue;
            }
            let line = text[..start].lines().count();
            let kernels: Vec<String> = match literals(head).first() {
                Some(k) => vec![k.to_string()],
                // A kernel chosen by a variable: the kernel names just above.
                None => {
                    let before: Vec<&str> = text[..start].lines().rev().take(8).collect();
                    before
                        .iter()
                        .flat_map(|l| literals(l))
                        .filter(|k| is_kernel(k))
                        .map(String::from)
                        .collect()
                }
            };
            // Parameter names: `.arg("name", ..)`, and the names of an array zipped with a
            // loop's values (`rechits`' eight output columns).
            let body = &text[head_end..end];
            let mut params = Vec::new();
            for piece in body.split(".arg(").skip(1) {
                let piece = piece.trim_start();
                if let Some(rest) = piece.strip_prefix('"') {
                    params.push(rest.split('"').next().unwrap().to_string());
                } else {
                    let name = piece.split(',').next().unwrap().trim();
                    let arr = format!("let {name}s = [");
                    let alt = format!("let out_{name}s = [");
                    let a = body
                        .find(&arr)
                        .or_else(|| body.find(&alt))
                        .unwrap_or_else(|| panic!("{file}:{line}: argument without a name"));
                    let list = &body[a..a + body[a..].find("];").unwrap()];
                    params.extend(literals(list).into_iter().map(String::from));
                }
            }
            assert!(!kernels.is_empty(), "{file}:{line}: which kernel?");
            out.push(Written {
                file: file.clone(),
                line,
                kernels,
                params,
            });
            at = end;
        }
    }
    out
}

/// The (name, type) list a launch would pass, types from the signature.
fn typed<'a>(kernel: &str, params: &'a [String]) -> Vec<(&'a str, String)> {
    let sig = signature(kernel).unwrap_or_else(|| panic!("no kernel {kernel}"));
    params
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let t = sig.get(k).map_or_else(String::new, |s| s.c_type.clone());
            (p.as_str(), t)
        })
        .collect()
}

#[test]
fn every_launch_in_the_steps_names_the_kernels_parameters_in_order() {
    let launches = written_launches();
    assert!(launches.len() >= 10, "{} launches found", launches.len());
    // The kernels with a list in `args`, launched through it (`steps::launch`).
    let mut kernels_seen: std::collections::BTreeSet<String> = quiver_gpu::args::lists()
        .into_iter()
        .map(|(k, _)| k.to_string())
        .chain(
            quiver_gpu::args::SHARED_LISTS
                .iter()
                .map(|s| s.0.to_string()),
        )
        .collect();
    for w in &launches {
        for k in &w.kernels {
            check_launch(k, &typed(k, &w.params))
                .unwrap_or_else(|e| panic!("{}:{}: {e}", w.file, w.line));
            kernels_seen.insert(k.clone());
        }
    }
    // Every kernel of the sources is launched by some step.
    for &(module, _, names) in kernels::SOURCES {
        for n in names {
            assert!(
                kernels_seen.contains(*n),
                "kernel {n} of {module} is never launched"
            );
        }
    }
}

#[test]
fn swapping_calibrates_two_u16_inputs_fails_the_check() {
    // The step's own argument list (`args::Calibrate`, which calibrate.rs pushes).
    let (_, mut args) = quiver_gpu::args::lists()
        .into_iter()
        .find(|(k, _)| *k == "calibrate")
        .unwrap();
    assert!(check_launch("calibrate", &args).is_ok());
    // `xx` and `yy` are both u16*: a check of the types alone cannot tell them apart.
    let (i, j) = (
        args.iter().position(|p| p.0 == "xx").unwrap(),
        args.iter().position(|p| p.0 == "yy").unwrap(),
    );
    args.swap(i, j);
    assert_eq!(args[i].1, args[j].1, "same types");
    let e = check_launch("calibrate", &args).unwrap_err();
    let GpuError::Arguments { kernel, why } = &e else {
        panic!("{e}")
    };
    assert_eq!(kernel, "calibrate");
    assert!(
        why.contains(&format!(
            "argument {} is passed as 'yy' but the kernel's parameter is 'xx'",
            i + 1
        )),
        "{e}"
    );
}
