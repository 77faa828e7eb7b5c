#!/usr/bin/env bash
# The throwaway control plane for scripts that run the end-to-end suites (sourced, not run): start_plane starts
# target/debug/control-plane in the background and exports what it wrote to its env file (KUBECONFIG and the
# TIERGATE_E2E_* variables the suites read); stop_plane stops it and removes its files. The plane takes its binaries
# from TIERGATE_TEST_ASSETS, KUBEBUILDER_ASSETS or PATH, and its versions from TIERGATE_E2E_KUBERNETES_VERSION,
# TIERGATE_E2E_KUEUE and TIERGATE_E2E_KUEUE_CRDS (docs/contributing.md, "End-to-end tests").

plane_pid=
plane_env=

# start_plane: builds the control-plane binary, starts it and waits until it has written its environment.
start_plane() {
  cargo build --locked -q -p tiergate-e2e --bin control-plane
  plane_env=$(mktemp -u)
  "${CARGO_TARGET_DIR:-target}/debug/control-plane" up --env-file "$plane_env" &
  plane_pid=$!
  until [ -s "$plane_env" ]; do
    if ! kill -0 "$plane_pid" 2>/dev/null; then
      plane_pid=
      echo "the throwaway control plane failed to start (see above)" >&2
      return 1
    fi
    sleep 1
  done
  set -a
  # shellcheck disable=SC1090
  . "$plane_env"
  set +a
}

# stop_plane: stops the plane started by start_plane (if any) and waits for it to undo everything.
stop_plane() {
  if [ -n "$plane_pid" ]; then
    kill "$plane_pid" 2>/dev/null || true
    wait "$plane_pid" 2>/dev/null || true
    plane_pid=
  fi
  if [ -n "$plane_env" ]; then
    # The next plane's suites must not see this one's KUBECONFIG or TIERGATE_E2E_* values.
    if [ -f "$plane_env" ]; then
      local name
      while IFS='=' read -r name _; do
        [ -n "$name" ] && unset "$name"
      done <"$plane_env"
    fi
    rm -f "$plane_env"
    plane_env=
  fi
}
