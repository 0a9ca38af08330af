//! `import "name" as m;` resolution: `scripts/lib/` next to the workflow (or extra dirs), then the copies of
//! `scripts/lib/*.rhai` embedded in the binary, so built-in workflows run from any directory. The
//! evaluation of an imported text ([`eval_module`]) also serves the profiles' `import "base/..."`.

use std::path::PathBuf;

use rhai::{Engine, EvalAltResult, Module, ModuleResolver, Position, Scope, Shared};

/// Library modules shipped with rdmakit (`scripts/lib/`).
pub const EMBEDDED_LIBS: &[(&str, &str)] = crate::builtins::LIBS;

/// File-first module resolver with an embedded fallback.
#[derive(Debug, Clone, Default)]
pub struct LibResolver {
    /// Directories searched in order.
    pub dirs: Vec<PathBuf>,
}

impl LibResolver {
    /// The source name and text `import "path"` resolves to.
    pub fn source(
        &self,
        path: &str,
        pos: Position,
    ) -> Result<(String, String), Box<EvalAltResult>> {
        let name = path.trim_end_matches(".rhai");
        let bare = name.rsplit('/').next().unwrap_or(name);
        match self
            .dirs
            .iter()
            .map(|d| d.join(format!("{name}.rhai")))
            .find(|p| p.is_file())
        {
            Some(p) => {
                let text = std::fs::read_to_string(&p).map_err(|e| {
                    EvalAltResult::ErrorSystem(format!("cannot read {}", p.display()), e.into())
                })?;
                Ok((p.display().to_string(), text))
            }
            None => match EMBEDDED_LIBS.iter().find(|(n, _)| *n == bare) {
                Some((n, text)) => Ok((
                    format!("{}/lib/{n}.rhai", crate::workflows::BUILTIN_PREFIX),
                    (*text).to_owned(),
                )),
                None => Err(EvalAltResult::ErrorModuleNotFound(path.to_owned(), pos).into()),
            },
        }
    }

    fn load(
        &self,
        engine: &Engine,
        path: &str,
        pos: Position,
    ) -> Result<Shared<Module>, Box<EvalAltResult>> {
        let (source_name, text) = self.source(path, pos)?;
        eval_module(engine, &source_name, &text, pos)
    }
}

/// Evaluates a module's `text` as `import` does: compiled and run by the importing (sandboxed) engine,
/// named `source_name` (the name its errors cite); an error in it is an `ErrorInModule` at the import's
/// `pos`. Shared by the workflow libraries and the profiles' embedded bases.
pub(crate) fn eval_module(
    engine: &Engine,
    source_name: &str,
    text: &str,
    pos: Position,
) -> Result<Shared<Module>, Box<EvalAltResult>> {
    let in_module = |e: Box<EvalAltResult>| {
        Box::new(EvalAltResult::ErrorInModule(source_name.to_owned(), e, pos))
    };
    let mut ast = engine
        .compile(text)
        .map_err(|e| in_module(EvalAltResult::from(e).into()))?;
    ast.set_source(source_name);
    let module = Module::eval_ast_as_new(Scope::new(), &ast, engine).map_err(in_module)?;
    Ok(Shared::new(module))
}

impl ModuleResolver for LibResolver {
    fn resolve(
        &self,
        engine: &Engine,
        _source: Option<&str>,
        path: &str,
        pos: Position,
    ) -> Result<Shared<Module>, Box<EvalAltResult>> {
        self.load(engine, path, pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_modules_are_named_as_built_in_text() {
        let r = LibResolver::default();
        let (name, text) = r.source("verify", Position::NONE).unwrap();
        assert_eq!(name, "<built-in>/lib/verify.rhai");
        assert!(!text.is_empty());
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("verify.rhai"), "fn x() { 1 }").unwrap();
        let r = LibResolver {
            dirs: vec![dir.path().to_owned()],
        };
        let (name, _) = r.source("verify", Position::NONE).unwrap();
        assert_eq!(name, dir.path().join("verify.rhai").display().to_string());
    }

    /// Every module in scripts/lib is embedded, byte for byte: a built-in workflow that imports a new module
    /// would otherwise fail outside a checkout, and an edited one would run its stale copy.
    #[test]
    fn every_lib_module_is_embedded_and_fresh() {
        let lib = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/lib");
        let mut on_disk: Vec<String> = std::fs::read_dir(&lib)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "rhai"))
            .filter_map(|p| p.file_stem().and_then(|s| s.to_str()).map(str::to_owned))
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> =
            EMBEDDED_LIBS.iter().map(|(n, _)| (*n).to_owned()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded);
        for (name, text) in EMBEDDED_LIBS {
            let disk = std::fs::read_to_string(lib.join(format!("{name}.rhai"))).unwrap();
            assert_eq!(
                disk, *text,
                "embedded copy of lib/{name}.rhai is stale: rebuild rdmakit"
            );
        }
    }
}
