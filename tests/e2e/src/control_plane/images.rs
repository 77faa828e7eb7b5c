//! Container images built here, with no registry and no builder: OCI image-layout archives (uncompressed layers)
//! that `ctr images import` loads into the real node's containerd. The pause and busybox images the node needs,
//! and tiergate's own image in the Dockerfile's final layout (the binary at `/tiergate`, uid 65532, glibc beside it
//! as distroless/cc carries it). Building is pure; [`import_image_archive`] does I/O.

use std::path::{Path, PathBuf};

use crate::HarnessError;

/// The busybox image the suites run (imported here, never pulled).
pub const BUSYBOX_IMAGE: &str = "docker.io/library/busybox:e2e";
/// The pod sandbox image (a busybox that sleeps forever; imported here, never pulled).
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:tiergate-e2e";
/// The busybox applets the images link (`/bin/<applet>` -> `busybox`).
const BUSYBOX_APPLETS: [&str; 10] = ["sh", "true", "echo", "sleep", "nc", "wget", "cat", "ls", "env", "id"];
/// The user and group the Dockerfile's final stage (distroless `nonroot`) and the chart run tiergate as.
pub const TIERGATE_USER: &str = "65532:65532";
/// The directories every container's root needs as mount points.
const ROOT_DIRECTORIES: [&str; 6] = ["dev", "etc", "proc", "sys", "tmp", "var"];

/// One entry of a layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayerEntry {
    /// A directory (mode 0755).
    Directory(String),
    /// A regular file with its contents and mode.
    File { path: String, contents: Vec<u8>, mode: u32 },
    /// A symbolic link to `target`.
    Symlink { path: String, target: String },
}

/// An image: its reference (`registry/repository:tag`), its one layer and its config's `config` object
/// (entrypoint, command, user, environment).
#[derive(Clone, Debug)]
pub struct ImageSpec {
    pub name: String,
    pub layer: Vec<LayerEntry>,
    pub config: serde_json::Value,
}

/// The layer of the pause and busybox images: the root directories, `/bin/busybox` and its applets.
pub fn busybox_layer(busybox: &[u8]) -> Vec<LayerEntry> {
    let mut layer: Vec<LayerEntry> =
        ROOT_DIRECTORIES.iter().chain(["bin"].iter()).map(|dir| LayerEntry::Directory((*dir).to_owned())).collect();
    layer.push(LayerEntry::File { path: "bin/busybox".to_owned(), contents: busybox.to_vec(), mode: 0o755 });
    layer.extend(
        BUSYBOX_APPLETS
            .iter()
            .map(|applet| LayerEntry::Symlink { path: format!("bin/{applet}"), target: "busybox".to_owned() }),
    );
    layer
}

/// The pause and busybox images, sharing one layer.
pub fn node_images(busybox: &[u8]) -> Vec<ImageSpec> {
    let layer = busybox_layer(busybox);
    vec![
        ImageSpec {
            name: PAUSE_IMAGE.to_owned(),
            layer: layer.clone(),
            config: serde_json::json!({"Entrypoint": ["/bin/busybox", "sleep", "2147483647"], "Env": ["PATH=/bin"]}),
        },
        ImageSpec {
            name: BUSYBOX_IMAGE.to_owned(),
            layer,
            config: serde_json::json!({"Cmd": ["sh"], "Env": ["PATH=/bin"]}),
        },
    ]
}

/// tiergate's image as the Dockerfile's final stage lays it out: `binary` at `/tiergate` (entrypoint, `--help` by
/// default), run as [`TIERGATE_USER`], with the shared libraries it links (`libraries`: each host path and its
/// contents, placed at the same path) as distroless/cc provides them.
pub fn tiergate_image(name: &str, binary: &[u8], libraries: &[(PathBuf, Vec<u8>)]) -> ImageSpec {
    let mut layer: Vec<LayerEntry> =
        ROOT_DIRECTORIES.iter().map(|dir| LayerEntry::Directory((*dir).to_owned())).collect();
    let mut directories = std::collections::BTreeSet::new();
    for (path, _) in libraries {
        let mut parent = path.parent();
        while let Some(dir) = parent.filter(|dir| *dir != Path::new("/")) {
            directories.insert(relative(dir));
            parent = dir.parent();
        }
    }
    layer.extend(directories.into_iter().map(LayerEntry::Directory));
    layer.extend(libraries.iter().map(|(path, contents)| LayerEntry::File {
        path: relative(path),
        contents: contents.clone(),
        mode: 0o755,
    }));
    layer.push(LayerEntry::File { path: "tiergate".to_owned(), contents: binary.to_vec(), mode: 0o755 });
    ImageSpec {
        name: name.to_owned(),
        layer,
        config: serde_json::json!({"Entrypoint": ["/tiergate"], "Cmd": ["--help"], "User": TIERGATE_USER}),
    }
}

/// `path` without its leading `/`, as a layer names it (`/lib/x.so` -> `lib/x.so`).
fn relative(path: &Path) -> String {
    path.display().to_string().trim_start_matches('/').to_owned()
}

/// The shared libraries `binary` loads, read from `ldd`'s answer (`name => /path (addr)` and the interpreter's
/// `/path (addr)` lines; the kernel's `linux-vdso` has no file and is left out).
pub fn parse_ldd(output: &str) -> Vec<PathBuf> {
    output
        .lines()
        .filter_map(|line| {
            let path = line.split("=>").nth(1).unwrap_or(line).split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// The shared libraries of the binary at `binary`, each with its contents (symbolic links resolved, so the image
/// holds the file under the name the loader asks for).
pub fn linked_libraries(binary: &Path) -> Result<Vec<(PathBuf, Vec<u8>)>, HarnessError> {
    let output = std::process::Command::new("ldd").arg(binary).output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() && !stdout.contains("not a dynamic executable") {
        return Err(format!("ldd {} failed: {}", binary.display(), String::from_utf8_lossy(&output.stderr)).into());
    }
    parse_ldd(&stdout).into_iter().map(|path| Ok((path.clone(), std::fs::read(&path)?))).collect()
}

/// An OCI image-layout archive holding `images`: each image's layer, config and manifest under `blobs/sha256/`
/// (a blob shared by two images written once), and an `index.json` naming each image for containerd
/// (`io.containerd.image.name`).
pub fn build_image_archive(images: &[ImageSpec]) -> Result<Vec<u8>, HarnessError> {
    let architecture = oci_architecture();
    let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
    let mut manifests = Vec::new();
    for image in images {
        let layer = build_layer(&image.layer)?;
        let layer_digest = sha256_digest(&layer);
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": architecture,
            "os": "linux",
            "config": image.config,
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        }))?;
        let config_digest = sha256_digest(&config);
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": [{
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer_digest,
                "size": layer.len(),
            }],
        }))?;
        let manifest_digest = sha256_digest(&manifest);
        let tag = image.name.rsplit(':').next().unwrap_or(&image.name);
        manifests.push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest.len(),
            "platform": {"architecture": architecture, "os": "linux"},
            "annotations": {"io.containerd.image.name": image.name, "org.opencontainers.image.ref.name": tag},
        }));
        blobs.extend([(layer_digest, layer), (config_digest, config), (manifest_digest, manifest)]);
    }
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    }))?;
    let mut archive = tar::Builder::new(Vec::new());
    append_file(&mut archive, "oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#, 0o644)?;
    append_file(&mut archive, "index.json", &index, 0o644)?;
    append_directory(&mut archive, "blobs")?;
    append_directory(&mut archive, "blobs/sha256")?;
    let mut written = std::collections::HashSet::new();
    for (digest, blob) in &blobs {
        if written.insert(digest.clone()) {
            let name = format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
            append_file(&mut archive, &name, blob, 0o644)?;
        }
    }
    Ok(archive.into_inner()?)
}

/// One layer as an uncompressed tar, every entry owned by root.
fn build_layer(entries: &[LayerEntry]) -> Result<Vec<u8>, HarnessError> {
    let mut layer = tar::Builder::new(Vec::new());
    for entry in entries {
        match entry {
            LayerEntry::Directory(path) => append_directory(&mut layer, path)?,
            LayerEntry::File { path, contents, mode } => append_file(&mut layer, path, contents, *mode)?,
            LayerEntry::Symlink { path, target } => {
                layer.append_link(&mut build_header(tar::EntryType::Symlink, 0o777, 0), path, target)?;
            }
        }
    }
    Ok(layer.into_inner()?)
}

/// A ustar header of an entry owned by root (uid and gid 0), dated the epoch, so the same inputs make the same
/// bytes (and digests).
fn build_header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut header = tar::Header::new_ustar();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header
}

fn append_file(archive: &mut tar::Builder<Vec<u8>>, path: &str, contents: &[u8], mode: u32) -> std::io::Result<()> {
    let mut header = build_header(tar::EntryType::Regular, mode, contents.len() as u64);
    archive.append_data(&mut header, path, contents)
}

fn append_directory(archive: &mut tar::Builder<Vec<u8>>, path: &str) -> std::io::Result<()> {
    let mut header = build_header(tar::EntryType::Directory, 0o755, 0);
    archive.append_data(&mut header, format!("{path}/"), std::io::empty())
}

/// The OCI name of this machine's architecture.
fn oci_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// `sha256:<hex>` of `bytes`.
fn sha256_digest(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let hex: String = digest.as_ref().iter().map(|byte| format!("{byte:02x}")).collect();
    format!("sha256:{hex}")
}

/// Writes `archive` under `dir` and imports it with `ctr` into the CRI's namespace of the containerd at `socket`.
pub fn import_image_archive(ctr: &Path, socket: &Path, dir: &Path, archive: &[u8]) -> Result<(), HarnessError> {
    let file = dir.join("images.tar");
    std::fs::write(&file, archive)?;
    let output = std::process::Command::new(ctr)
        .arg("--address")
        .arg(socket)
        .args(["--namespace", "k8s.io", "images", "import"])
        .arg(&file)
        .output()?;
    let _ = std::fs::remove_file(&file);
    if output.status.success() {
        Ok(())
    } else {
        Err(format!("failed to import the images: ctr: {}", String::from_utf8_lossy(&output.stderr).trim()).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(path, entry type, size, uid)` of each entry of a tar archive.
    fn entries(archive: &[u8]) -> Vec<(String, tar::EntryType, u64, u64)> {
        let mut archive = tar::Archive::new(archive);
        archive
            .entries()
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                let header = entry.header();
                let path = entry.path().unwrap().display().to_string();
                (path, header.entry_type(), header.size().unwrap(), header.uid().unwrap())
            })
            .collect()
    }

    /// The contents of the entry at `path` of a tar archive.
    fn entry_contents(archive: &[u8], path: &str) -> Vec<u8> {
        let mut archive = tar::Archive::new(archive);
        let mut entry = archive
            .entries()
            .unwrap()
            .map(Result::unwrap)
            .find(|entry| entry.path().unwrap().display().to_string() == path)
            .unwrap();
        let mut contents = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut contents).unwrap();
        contents
    }

    #[test]
    fn the_node_images_share_one_layer_and_every_blob_matches_its_digest() {
        let archive = build_image_archive(&node_images(b"not really busybox")).unwrap();
        let names: Vec<String> = entries(&archive).into_iter().map(|(name, ..)| name).collect();
        assert_eq!(&names[..2], ["oci-layout", "index.json"]);
        // One shared layer, a config and a manifest per image.
        let blob_names: Vec<&String> = names.iter().filter(|name| name.len() > "blobs/sha256/".len() + 1).collect();
        assert_eq!(blob_names.len(), 5);
        for name in blob_names {
            let digest = format!("sha256:{}", name.trim_start_matches("blobs/sha256/"));
            assert_eq!(sha256_digest(&entry_contents(&archive, name)), digest);
        }
        let layer = build_layer(&busybox_layer(b"not really busybox")).unwrap();
        let layer_entries = entries(&layer);
        assert!(layer_entries.contains(&("bin/busybox".to_owned(), tar::EntryType::Regular, 18, 0)));
        assert!(layer_entries.iter().any(|(path, kind, ..)| path == "bin/sh" && *kind == tar::EntryType::Symlink));
    }

    #[test]
    fn tiergates_image_has_the_dockerfiles_layout() {
        let libraries = vec![
            (PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"), b"libc".to_vec()),
            (PathBuf::from("/lib64/ld-linux-x86-64.so.2"), b"ld".to_vec()),
        ];
        let image = tiergate_image("example.test/tiergate:e2e", b"ELF", &libraries);
        assert_eq!(image.config["Entrypoint"], serde_json::json!(["/tiergate"]));
        assert_eq!(image.config["User"], "65532:65532");
        let archive = build_image_archive(std::slice::from_ref(&image)).unwrap();
        let index: serde_json::Value = serde_json::from_slice(&entry_contents(&archive, "index.json")).unwrap();
        assert_eq!(index["manifests"][0]["annotations"]["io.containerd.image.name"], "example.test/tiergate:e2e");
        let layer = entries(&build_layer(&image.layer).unwrap());
        let find = |path: &str| layer.iter().find(|(name, ..)| name == path).cloned();
        assert_eq!(
            find("tiergate").map(|(_, kind, size, uid)| (kind, size, uid)),
            Some((tar::EntryType::Regular, 3, 0))
        );
        assert!(find("lib/x86_64-linux-gnu/libc.so.6").is_some());
        assert!(find("lib/x86_64-linux-gnu/").is_some() && find("lib64/").is_some() && find("tmp/").is_some());
    }

    #[test]
    fn ldd_lines_name_the_libraries_and_the_loader_but_not_the_vdso() {
        let output = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x1)\n\
                      \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x2)\n\t/lib64/ld-linux-x86-64.so.2 (0x3)\n";
        assert_eq!(
            parse_ldd(output),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
    }

    #[test]
    fn the_sha256_digest_is_the_known_one() {
        assert_eq!(sha256_digest(b"abc"), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
