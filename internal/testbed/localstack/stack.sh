#!/usr/bin/env bash
# Local stack for tests and the demo, loopback only:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok (fake nodes),
# Prometheus, a Pushgateway, the mesh simulator and a real Traefik proxy.
#
#   stack.sh up      start what is not running (reuses what runs), write <stack dir>/env
#   stack.sh down    stop everything this stack started
#   stack.sh status  show each component's pid and health
#
# CANARY_STACK_DIR (default <repo>/.local) holds state, logs, pid files and env, so tests
# can run a throw-away instance. Build products are cached in CANARY_CACHE_DIR
# (default ${XDG_CACHE_HOME:-~/.cache}/terraform-provider-canary, outside the checkout, so a
# fresh clone on the same machine reuses the Kubernetes build) and shared by every instance. Ports: CANARY_ETCD_PORT,
# CANARY_ETCD_PEER_PORT, CANARY_APISERVER_PORT, CANARY_CONTROLLER_MANAGER_PORT,
# CANARY_SCHEDULER_PORT, CANARY_PROMETHEUS_PORT, CANARY_PUSHGATEWAY_PORT, CANARY_SIMULATOR_PORT,
# CANARY_SIMULATOR_SOCKS_PORT (the simulator playing the pods, Traefik's proxy), CANARY_TRAEFIK_PORT
# (Traefik's web entry point) and CANARY_TRAEFIK_ADMIN_PORT (ping, metrics, API).
# Extra flags per component: CANARY_<COMPONENT>_EXTRA_ARGS (e.g. CANARY_PROMETHEUS_EXTRA_ARGS).
# CANARY_NO_INSTALL=1 forbids apt-get; CANARY_NO_REBUILD=1 builds only missing binaries.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$script_dir/../../.." && pwd)
stack_dir=${CANARY_STACK_DIR:-$root/.local}
cache_dir=${CANARY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/terraform-provider-canary}
mkdir -p "$stack_dir" "$cache_dir"
stack_dir=$(cd "$stack_dir" && pwd)
cache_dir=$(cd "$cache_dir" && pwd)

bin_dir=$cache_dir/bin
# The project's own binaries are built from this checkout, so they live with its stack.
own_bin_dir=$stack_dir/bin
provider_dir=$stack_dir/provider
tfbin_dir=$cache_dir/tfbin
terraformrc=$stack_dir/terraformrc
state_dir=$stack_dir/state
log_dir=$stack_dir/log
run_dir=$stack_dir/run
cert_dir=$state_dir/certs
kubeconfig=$state_dir/kubeconfig

kube_version=v1.34.3
kwok_version=v0.8.0
terraform_version=v1.5.7
# The Pushgateway the provider's pushgateway setting sends its series to, which Prometheus
# scrapes. Built from the Go module proxy (v1.11.2 is not served there).
pushgateway_version=v1.11.1
pushgateway_bin=$cache_dir/tools/pushgateway-$pushgateway_version/pushgateway
# Traefik, the one third-party data plane: v3.6.10 is the newest v3 that builds from the Go module
# proxy. It routes to pod addresses (10.244.0.0/16, which nothing serves) through its proxy, the
# simulator's SOCKS5 listener, which answers as the pod (meshsim's socks.go and pods.go).
traefik_version=v3.6.10
traefik_bin=$cache_dir/tools/traefik-$traefik_version/traefik
node_count=3

etcd_port=${CANARY_ETCD_PORT:-23790}
etcd_peer_port=${CANARY_ETCD_PEER_PORT:-23800}
apiserver_port=${CANARY_APISERVER_PORT:-16443}
controller_manager_port=${CANARY_CONTROLLER_MANAGER_PORT:-20257}
scheduler_port=${CANARY_SCHEDULER_PORT:-20259}
prometheus_port=${CANARY_PROMETHEUS_PORT:-19090}
pushgateway_port=${CANARY_PUSHGATEWAY_PORT:-19091}
simulator_port=${CANARY_SIMULATOR_PORT:-19095}
simulator_socks_port=${CANARY_SIMULATOR_SOCKS_PORT:-19096}
traefik_port=${CANARY_TRAEFIK_PORT:-19080}
traefik_admin_port=${CANARY_TRAEFIK_ADMIN_PORT:-19081}

# Start order; down goes in reverse. Prometheus needs nothing else, so it goes first.
# Traefik goes last: it needs the CRDs (installed just before it) and the simulator as its proxy.
components=(prometheus pushgateway etcd kube-apiserver kube-controller-manager kube-scheduler kwok meshsim traefik)

say() { echo "stack: $*"; }
warn() { echo "stack: warning: $*" >&2; }
die() {
  echo "$*" >&2
  exit 1
}

# --- processes ------------------------------------------------------------------------

pid_file() { echo "$run_dir/$1.pid"; }
log_file() { echo "$log_dir/$1.log"; }

# alive PID: the process exists and is not a zombie.
alive() {
  local stat
  stat=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ $stat != Z* ]]
}

# group_alive PGID: some non-zombie process is still in the process group.
group_alive() {
  local pgid=$1 f line
  for f in /proc/[0-9]*/stat; do
    read -r line 2>/dev/null <"$f" || continue
    line=${line##*) }
    set -- $line
    [[ $3 == "$pgid" && $1 != Z ]] && return 0
  done
  return 1
}

# component_pid NAME: prints the pid of our running NAME, or fails. The command line
# must still name the binary, so a recycled pid is not taken for ours.
component_pid() {
  local f pid
  f=$(pid_file "$1")
  [[ -s $f ]] || return 1
  pid=$(<"$f")
  alive "$pid" || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$(component_binary "$1")" || return 1
  echo "$pid"
}

component_binary() {
  case $1 in
  etcd) echo "$etcd_bin" ;;
  prometheus) echo "$prometheus_bin" ;;
  pushgateway) echo "$pushgateway_bin" ;;
  meshsim) echo "$own_bin_dir/meshsim" ;;
  traefik) echo "$traefik_bin" ;;
  *) echo "$bin_dir/$1" ;;
  esac
}

component_ports() {
  case $1 in
  etcd) echo "$etcd_port $etcd_peer_port" ;;
  kube-apiserver) echo "$apiserver_port" ;;
  kube-controller-manager) echo "$controller_manager_port" ;;
  kube-scheduler) echo "$scheduler_port" ;;
  prometheus) echo "$prometheus_port" ;;
  pushgateway) echo "$pushgateway_port" ;;
  meshsim) echo "$simulator_port $simulator_socks_port" ;;
  traefik) echo "$traefik_port $traefik_admin_port" ;;
  esac
}

port_in_use() { (: <"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

healthy() {
  case $1 in
  etcd) curl -fsS -m 5 "http://127.0.0.1:$etcd_port/health" 2>/dev/null | grep -q '"health":"true"' ;;
  kube-apiserver)
    [[ -s $cert_dir/apiserver.crt ]] &&
      curl -fsS -m 5 --cacert "$cert_dir/apiserver.crt" -H "Authorization: Bearer $(token)" \
        "https://127.0.0.1:$apiserver_port/readyz" >/dev/null 2>&1
    ;;
  # Their serving certificates are generated in memory; /healthz needs no credentials.
  kube-controller-manager) curl -fsSk -m 5 "https://127.0.0.1:$controller_manager_port/healthz" >/dev/null 2>&1 ;;
  kube-scheduler) curl -fsSk -m 5 "https://127.0.0.1:$scheduler_port/healthz" >/dev/null 2>&1 ;;
  kwok) true ;; # serves nothing; its nodes turning Ready is the check
  prometheus) curl -fsS -m 5 "http://127.0.0.1:$prometheus_port/-/ready" >/dev/null 2>&1 ;;
  pushgateway) curl -fsS -m 5 "http://127.0.0.1:$pushgateway_port/-/ready" >/dev/null 2>&1 ;;
  meshsim) curl -fsS -m 5 "http://127.0.0.1:$simulator_port/healthz" >/dev/null 2>&1 ;;
  traefik) curl -fsS -m 5 "http://127.0.0.1:$traefik_admin_port/ping" >/dev/null 2>&1 ;;
  esac
}

last_lines() {
  local log
  log=$(log_file "$1")
  printf '%s exited during start-up; last lines of %s:\n' "$1" "$log"
  tail -n 25 "$log" 2>/dev/null | sed 's/^/  /'
}

# start NAME CMD...: runs CMD in its own session (so down can stop its process group),
# detached from our output and from the lock on fd 9.
start() {
  local name=$1
  shift
  local extra_var extra
  extra_var=CANARY_$(extra_args_name "$name")_EXTRA_ARGS
  extra=${!extra_var:-}
  # shellcheck disable=SC2086 # extra flags are split on spaces on purpose
  setsid "$@" $extra >"$(log_file "$name")" 2>&1 </dev/null 9>&- &
  echo $! >"$(pid_file "$name")"
  say "started $name (pid $!)"
}

extra_args_name() {
  case $1 in
  kube-apiserver) echo APISERVER ;;
  kube-controller-manager) echo CONTROLLER_MANAGER ;;
  kube-scheduler) echo SCHEDULER ;;
  meshsim) echo SIMULATOR ;;
  *) echo "$1" | tr 'a-z-' 'A-Z_' ;;
  esac
}

# eventually_healthy NAME SECONDS: a running component may be starting or busy.
eventually_healthy() {
  local deadline=$((SECONDS + $2))
  until healthy "$1"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.5
  done
}

# wait_healthy NAME SECONDS
wait_healthy() {
  local name=$1 deadline=$((SECONDS + $2)) pid
  pid=$(<"$(pid_file "$name")")
  until healthy "$name"; do
    if ! alive "$pid"; then
      die "$(last_lines "$name")"
    fi
    if ((SECONDS >= deadline)); then
      die "$name did not become ready within $2 s; last lines of $(log_file "$name"):
$(tail -n 25 "$(log_file "$name")" | sed 's/^/  /')"
    fi
    sleep 0.2
  done
}

# signal_stop NAME: sends SIGTERM to NAME's process group; prints the group id when
# something was signalled.
signal_stop() {
  local name=$1 f pid
  f=$(pid_file "$name")
  [[ -s $f ]] || return 0
  pid=$(<"$f")
  # A live leader whose command line is not ours means the pid was recycled: leave it.
  if alive "$pid" && ! component_pid "$name" >/dev/null; then
    warn "pid $pid in $f is no longer $name; not stopping it"
    rm -f "$f"
    return 0
  fi
  if group_alive "$pid"; then
    kill -TERM -- "-$pid" 2>/dev/null || true
    echo "$pid"
  else
    rm -f "$f"
  fi
}

# wait_stopped NAME PGID: waits for the group to exit, killing it after 20 s.
wait_stopped() {
  local name=$1 pid=$2 i
  for ((i = 0; i < 200; i++)); do
    group_alive "$pid" || break
    sleep 0.1
  done
  if group_alive "$pid"; then
    warn "$name (pid $pid) did not exit within 20 s of SIGTERM; killing it"
    kill -KILL -- "-$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      group_alive "$pid" || break
      sleep 0.1
    done
  fi
  group_alive "$pid" && die "$name (pid $pid) survived SIGKILL"
  rm -f "$(pid_file "$name")"
  say "stopped $name (pid $pid)"
}

stop() {
  local pid
  pid=$(signal_stop "$1")
  [[ -z $pid ]] || wait_stopped "$1" "$pid"
}

# --- tools ----------------------------------------------------------------------------

# need_package COMMAND PACKAGE: finds a Debian-packaged command, installing it if allowed.
need_package() {
  local cmd=$1 pkg=$2 log=$log_dir/apt.log
  command -v "$cmd" >/dev/null 2>&1 && return 0
  if [[ ${CANARY_NO_INSTALL:-} != 1 ]] && command -v apt-get >/dev/null 2>&1; then
    local sudo=
    [[ $(id -u) == 0 ]] || sudo=sudo
    say "installing Debian package $pkg (log $log)"
    if DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "$pkg" >>"$log" 2>&1 ||
      { $sudo apt-get update >>"$log" 2>&1 &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "$pkg" >>"$log" 2>&1; }; then
      command -v "$cmd" >/dev/null 2>&1 && return 0
    fi
  fi
  die "$cmd: Debian package $pkg is missing and could not be installed"
}

# newer_sources BINARY DIR...: succeeds when BINARY is missing or a Go file under DIR (or
# go.mod/go.sum) is newer than it. CANARY_NO_REBUILD=1 only builds what is missing (tests
# use it so they never swap binaries under the shared stack).
newer_sources() {
  local bin=$1
  shift
  [[ -x $bin ]] || return 0
  [[ ${CANARY_NO_REBUILD:-} == 1 ]] && return 1
  [[ $root/go.mod -nt $bin || $root/go.sum -nt $bin ]] && return 0
  [[ -n $(find "$@" -name '*.go' ! -name '*_test.go' -newer "$bin" -print -quit 2>/dev/null) ]]
}

# go_build NAME OUTPUT PACKAGE [FLAGS...]: builds next to OUTPUT and renames, so a running
# instance never sees half a binary.
go_build() {
  local name=$1 out=$2 pkg=$3 log=$log_dir/build-$1.log
  say "building $name"
  mkdir -p "$(dirname "$out")"
  if ! (cd "$root" && go build "${@:4}" -o "$out.tmp" "$pkg") >"$log" 2>&1; then
    die "$name: build failed; last lines of $log:
$(tail -n 25 "$log" | sed 's/^/  /')"
  fi
  mv -f "$out.tmp" "$out"
}

build_all() {
  local b
  for b in kube-apiserver kube-controller-manager kube-scheduler; do
    if [[ ! -x $bin_dir/$b ]]; then
      say "building kube-apiserver, kube-controller-manager and kube-scheduler $kube_version (cold: ~10 min, log $log_dir/build-kube.log)"
      if ! KUBE_VERSION=$kube_version bash "$script_dir/scripts/build-kube.sh" "$bin_dir" "$cache_dir/build/kube" \
        >"$log_dir/build-kube.log" 2>&1; then
        die "kube-apiserver: build failed; last lines of $log_dir/build-kube.log:
$(tail -n 25 "$log_dir/build-kube.log" | sed 's/^/  /')"
      fi
      break
    fi
  done
  if [[ ! -x $bin_dir/kwok ]]; then
    say "installing kwok $kwok_version (cold: ~3 min)"
    if ! (cd "$root" && GOBIN=$bin_dir go install "sigs.k8s.io/kwok/cmd/kwok@$kwok_version") >"$log_dir/build-kwok.log" 2>&1; then
      die "kwok: install failed; last lines of $log_dir/build-kwok.log:
$(tail -n 25 "$log_dir/build-kwok.log" | sed 's/^/  /')"
    fi
  fi
  build_pushgateway
  build_traefik
  if newer_sources "$own_bin_dir/stackctl" "$script_dir"; then
    go_build stackctl "$own_bin_dir/stackctl" ./internal/testbed/localstack/cmd/stackctl
  fi
  if [[ -d $root/internal/testbed/cmd/meshsim ]]; then
    if newer_sources "$own_bin_dir/meshsim" "$root/internal/testbed/meshsim" "$root/internal/testbed/cmd/meshsim"; then
      go_build meshsim "$own_bin_dir/meshsim" ./internal/testbed/cmd/meshsim
    fi
  else
    warn "internal/testbed/cmd/meshsim does not exist yet; the simulator is not started"
  fi
  if [[ -f $root/main.go ]]; then
    if newer_sources "$provider_dir/terraform-provider-canary" "$root/main.go" "$root/internal"; then
      go_build provider "$provider_dir/terraform-provider-canary" . -tags=pprof
    fi
  else
    warn "main.go does not exist yet; the provider is not built"
  fi
  build_terraform
}

# build_pushgateway builds the Pushgateway inside its downloaded module: `go install` of it
# fails on the proxy's missing version list (its deprecation check).
build_pushgateway() {
  [[ -x $pushgateway_bin ]] && return
  say "building pushgateway $pushgateway_version (cold: ~2 min)"
  local dir log=$log_dir/build-pushgateway.log
  mkdir -p "$(dirname "$pushgateway_bin")"
  if ! { dir=$(cd / && go mod download -json "github.com/prometheus/pushgateway@$pushgateway_version" |
    sed -n 's/^\t"Dir": "\(.*\)",$/\1/p') && [[ -n $dir ]] &&
    (cd "$dir" && go build -o "$pushgateway_bin.tmp" .); } >"$log" 2>&1; then
    die "pushgateway: build failed; last lines of $log:
$(tail -n 25 "$log" | sed 's/^/  /')"
  fi
  mv -f "$pushgateway_bin.tmp" "$pushgateway_bin"
}

# build_traefik builds Traefik inside its downloaded module, like the Pushgateway. -mod=mod lets
# the build record go.sum entries the module's own go.sum lacks.
build_traefik() {
  [[ -x $traefik_bin ]] && return
  say "building traefik $traefik_version (cold: ~10 min, log $log_dir/build-traefik.log)"
  local dir log=$log_dir/build-traefik.log
  mkdir -p "$(dirname "$traefik_bin")"
  if ! { dir=$(cd / && go mod download -json "github.com/traefik/traefik/v3@$traefik_version" |
    sed -n 's/^\t"Dir": "\(.*\)",$/\1/p') && [[ -n $dir ]] &&
    (cd "$dir" && GOFLAGS=-mod=mod go build -o "$traefik_bin.tmp" ./cmd/traefik); } >"$log" 2>&1; then
    die "traefik: build failed; last lines of $log:
$(tail -n 25 "$log" | sed 's/^/  /')"
  fi
  mv -f "$traefik_bin.tmp" "$traefik_bin"
}

# build_terraform puts terraform in tfbin: the machine's own, else one built from source.
build_terraform() {
  mkdir -p "$tfbin_dir"
  local tf=${CANARY_TERRAFORM:-}
  if [[ -z $tf ]]; then
    if [[ -x /usr/local/bin/terraform ]]; then
      tf=/usr/local/bin/terraform
    else
      tf=$(PATH=${PATH//$tfbin_dir:/} command -v terraform 2>/dev/null || true)
    fi
  fi
  if [[ -n $tf && $tf != "$tfbin_dir/terraform" ]]; then
    [[ $(readlink "$tfbin_dir/terraform" 2>/dev/null) == "$tf" ]] || ln -sfn "$tf" "$tfbin_dir/terraform"
    return
  fi
  [[ -x $tfbin_dir/terraform ]] && return
  say "building terraform $terraform_version (cold: ~3 min)"
  if ! (cd "$root" && GOBIN=$tfbin_dir go install "github.com/hashicorp/terraform@$terraform_version") >"$log_dir/build-terraform.log" 2>&1; then
    die "terraform: build failed; last lines of $log_dir/build-terraform.log:
$(tail -n 25 "$log_dir/build-terraform.log" | sed 's/^/  /')"
  fi
}

# --- configuration --------------------------------------------------------------------

token() { cut -d, -f1 "$state_dir/tokens.csv" 2>/dev/null; }

write_config() {
  mkdir -p "$cert_dir" "$state_dir/etcd" "$state_dir/prometheus"
  if [[ ! -s $state_dir/tokens.csv ]]; then
    echo "$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'),admin,admin,system:masters" >"$state_dir/tokens.csv"
  fi
  if [[ ! -s $state_dir/sa.key ]]; then
    openssl genrsa -out "$state_dir/sa.key" 2048 2>/dev/null
    openssl rsa -in "$state_dir/sa.key" -pubout -out "$state_dir/sa.pub" 2>/dev/null
  fi
  # The API server writes its self-signed certificate (with its CA) into cert_dir on first
  # start; clients trust that file, so TLS is verified.
  cat >"$kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: canary-local
  cluster:
    server: https://127.0.0.1:$apiserver_port
    certificate-authority: $cert_dir/apiserver.crt
users:
- name: admin
  user:
    token: $(token)
contexts:
- name: canary-local
  context:
    cluster: canary-local
    user: admin
current-context: canary-local
EOF
  chmod 600 "$kubeconfig"
  cat >"$state_dir/prometheus.yml.new" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
- job_name: meshsim
  static_configs:
  - targets: ['127.0.0.1:$simulator_port']
  # The application's series of a namespace named chartlabels-* carry the pod labels of
  # kube-prometheus-stack's and prometheus-community/prometheus's default pod scraping
  # (namespace, pod) in place of Flagger's, so that tests run the built-in checks on them.
  metric_relabel_configs:
  - source_labels: [__name__, kubernetes_namespace]
    regex: 'http_request_duration_seconds_(bucket|count|sum);(chartlabels-.+)'
    target_label: namespace
    replacement: '\$2'
  - source_labels: [__name__, kubernetes_namespace, kubernetes_pod_name]
    regex: 'http_request_duration_seconds_(bucket|count|sum);chartlabels-.+;(.+)'
    target_label: pod
    replacement: '\$2'
  - source_labels: [__name__, kubernetes_namespace]
    regex: 'http_request_duration_seconds_(bucket|count|sum);chartlabels-.+'
    target_label: kubernetes_pod_name
    replacement: ''
  - source_labels: [__name__, kubernetes_namespace]
    regex: 'http_request_duration_seconds_(bucket|count|sum);chartlabels-.+'
    target_label: kubernetes_namespace
    replacement: ''
# honor_labels keeps the pushed series' own labels (namespace, name), as the Pushgateway asks.
- job_name: pushgateway
  honor_labels: true
  static_configs:
  - targets: ['127.0.0.1:$pushgateway_port']
- job_name: traefik
  static_configs:
  - targets: ['127.0.0.1:$traefik_admin_port']
EOF
  if cmp -s "$state_dir/prometheus.yml.new" "$state_dir/prometheus.yml"; then
    rm -f "$state_dir/prometheus.yml.new"
  else
    mv -f "$state_dir/prometheus.yml.new" "$state_dir/prometheus.yml"
    prometheus_config_changed=1
  fi
  # Traefik's static configuration. Its Kubernetes providers find the API server through
  # KUBECONFIG (set at launch); the IngressClass and GatewayClass named traefik are in
  # traefik-classes.yaml. The CRD provider takes every IngressRoute.
  cat >"$state_dir/traefik.yml.new" <<EOF
# Traefik runs with HTTP_PROXY=socks5://127.0.0.1:$simulator_socks_port (a change restarts it).
global:
  checkNewVersion: false
  sendAnonymousUsage: false
entryPoints:
  web:
    address: 127.0.0.1:$traefik_port
  traefik:
    address: 127.0.0.1:$traefik_admin_port
ping: {}
api:
  dashboard: false
  insecure: true
metrics:
  prometheus:
    addServicesLabels: true
providers:
  kubernetesCRD:
    allowEmptyServices: true
  kubernetesIngress:
    ingressClass: traefik
  kubernetesGateway: {}
log:
  level: INFO
  noColor: true
EOF
  if cmp -s "$state_dir/traefik.yml.new" "$state_dir/traefik.yml"; then
    rm -f "$state_dir/traefik.yml.new"
  else
    mv -f "$state_dir/traefik.yml.new" "$state_dir/traefik.yml"
    traefik_config_changed=1
  fi
  cat >"$terraformrc.tmp" <<EOF
provider_installation {
  dev_overrides {
    "registry.terraform.io/canary-release/canary" = "$provider_dir"
    "registry.opentofu.org/canary-release/canary" = "$provider_dir"
  }
  direct {}
}
EOF
  mv -f "$terraformrc.tmp" "$terraformrc"
}

write_env() {
  cat >"$stack_dir/env.tmp" <<EOF
# Written by internal/testbed/localstack/stack.sh up; source it: . $stack_dir/env
export KUBECONFIG='$kubeconfig'
export KUBE_CONFIG_PATH='$kubeconfig'
# The routers' conformance test against this API server (internal/mesh/conformance).
export CANARY_TEST_KUBECONFIG='$kubeconfig'
export CANARY_PROMETHEUS_ADDRESS='http://127.0.0.1:$prometheus_port'
export CANARY_SIMULATOR_ADDRESS='http://127.0.0.1:$simulator_port'
export CANARY_PUSHGATEWAY_ADDRESS='http://127.0.0.1:$pushgateway_port'
# Traefik's web entry point (host:port): real requests through the real proxy.
export CANARY_PROXY_ADDRESS='127.0.0.1:$traefik_port'
# Traefik's API (its traefik entry point): the configuration it applies, /api/http/services.
export CANARY_PROXY_API_ADDRESS='http://127.0.0.1:$traefik_admin_port'
export TF_CLI_CONFIG_FILE='$terraformrc'
export CANARY_PROVIDER_DIR='$provider_dir'
export CANARY_TERRAFORM='$tfbin_dir/terraform'
export PATH='$tfbin_dir':"\$PATH"
EOF
  mv -f "$stack_dir/env.tmp" "$stack_dir/env"
}

kwok_source() {
  local dir
  dir=$(go env GOMODCACHE)/sigs.k8s.io/kwok@$kwok_version
  if [[ ! -d $dir ]]; then
    (cd / && GO111MODULE=on GOFLAGS= go mod download "sigs.k8s.io/kwok@$kwok_version") >&2
  fi
  echo "$dir"
}

# --- up / down ------------------------------------------------------------------------

launch() {
  case $1 in
  etcd)
    start etcd "$etcd_bin" --name canary-local --data-dir "$state_dir/etcd" \
      --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
      --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
      --initial-cluster "canary-local=http://127.0.0.1:$etcd_peer_port"
    wait_healthy etcd 60
    ;;
  kube-apiserver)
    # WatchList=false: with the gate on, the server turns every watch from resourceVersion
    # "" or "0" (kwok's informers always use "0") into a watch-list stream, which Debian's
    # etcd 3.4 cannot serve (no RequestWatchProgress). Those watches then fail, kwok's
    # caches lag, its lease renewals conflict and the nodes flap NotReady.
    start kube-apiserver "$bin_dir/kube-apiserver" --etcd-servers="http://127.0.0.1:$etcd_port" \
      --secure-port="$apiserver_port" --bind-address=127.0.0.1 --cert-dir="$cert_dir" \
      --token-auth-file="$state_dir/tokens.csv" --authorization-mode=RBAC \
      --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$state_dir/sa.pub" \
      --service-account-signing-key-file="$state_dir/sa.key" --service-cluster-ip-range=10.96.0.0/16 \
      --allow-privileged=true --feature-gates=WatchList=false
    wait_healthy kube-apiserver 180
    ;;
  kube-controller-manager)
    start kube-controller-manager "$bin_dir/kube-controller-manager" --kubeconfig="$kubeconfig" \
      --leader-elect=false --controllers='*,-serviceaccount-token' \
      --service-account-private-key-file="$state_dir/sa.key" --root-ca-file="$cert_dir/apiserver.crt" \
      --bind-address=127.0.0.1 --secure-port="$controller_manager_port"
    wait_healthy kube-controller-manager 120
    ;;
  kube-scheduler)
    start kube-scheduler "$bin_dir/kube-scheduler" --kubeconfig="$kubeconfig" --leader-elect=false \
      --bind-address=127.0.0.1 --secure-port="$scheduler_port"
    wait_healthy kube-scheduler 120
    ;;
  kwok)
    "$own_bin_dir/stackctl" stages -kwok-dir "$(kwok_source)" -out "$state_dir/kwok-stages.yaml"
    # Without the lease duration the node controller marks the nodes NotReady after 40 s.
    start kwok "$bin_dir/kwok" --kubeconfig="$kubeconfig" --config="$state_dir/kwok-stages.yaml" \
      --node-lease-duration-seconds=40 --manage-all-nodes=false \
      --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
      --cidr=10.244.0.1/16 --node-ip=10.0.0.1
    sleep 1
    alive "$(<"$(pid_file kwok)")" || die "$(last_lines kwok)"
    ;;
  prometheus)
    start prometheus "$prometheus_bin" --config.file="$state_dir/prometheus.yml" \
      --web.listen-address="127.0.0.1:$prometheus_port" --storage.tsdb.path="$state_dir/prometheus" \
      --web.enable-lifecycle
    wait_healthy prometheus 60
    ;;
  pushgateway)
    start pushgateway "$pushgateway_bin" --web.listen-address="127.0.0.1:$pushgateway_port" \
      --persistence.file="$state_dir/pushgateway.metrics" --persistence.interval=5s
    wait_healthy pushgateway 60
    ;;
  meshsim)
    start meshsim "$own_bin_dir/meshsim" --kubeconfig "$kubeconfig" --listen "127.0.0.1:$simulator_port" \
      --invariant-log "$log_dir/meshsim-invariants.log" --proxy-address "127.0.0.1:$traefik_port" \
      --socks-listen "127.0.0.1:$simulator_socks_port"
    wait_healthy meshsim 60
    ;;
  traefik)
    # The simulator is Traefik's proxy (SOCKS5: an HTTP proxy would only see the route's Host),
    # so that it answers for the pod addresses; NO_PROXY keeps loopback direct and must not
    # cover the pod range.
    start traefik env KUBECONFIG="$kubeconfig" HTTP_PROXY="socks5://127.0.0.1:$simulator_socks_port" \
      NO_PROXY=127.0.0.1,localhost "$traefik_bin" --configFile="$state_dir/traefik.yml"
    wait_healthy traefik 60
    ;;
  esac
}

# install_cluster_objects installs the CRDs and the classes Traefik serves, once per up.
install_cluster_objects() {
  ((cluster_objects_installed)) && return
  "$own_bin_dir/stackctl" crds -kubeconfig "$kubeconfig" -root "$root"
  "$own_bin_dir/stackctl" apply -kubeconfig "$kubeconfig" "$script_dir/traefik-classes.yaml"
  cluster_objects_installed=1
}

# wanted NAME: whether this stack runs NAME (the simulator only once it exists).
wanted() {
  [[ $1 != meshsim || -x $own_bin_dir/meshsim ]]
}

# check_ports: every port of a component that is not already ours and running is free.
check_ports() {
  local c p
  for c in "${components[@]}"; do
    wanted "$c" || continue
    component_pid "$c" >/dev/null && continue
    for p in $(component_ports "$c"); do
      if port_in_use "$p"; then
        die "$c: port $p is already in use (see $(log_file "$c"))"
      fi
    done
  done
}

up() {
  local started=$SECONDS c pid
  mkdir -p "$state_dir" "$log_dir" "$run_dir" "$bin_dir"
  exec 9>"$run_dir/up.lock"
  flock 9
  need_package etcd etcd-server
  need_package prometheus prometheus
  etcd_bin=$(command -v etcd)
  prometheus_bin=$(command -v prometheus)
  check_ports
  (
    # Builds are shared by every stack instance; one at a time.
    exec 8>"$cache_dir/build.lock"
    flock 8
    build_all
  ) 8>&-
  prometheus_config_changed=0 traefik_config_changed=0 cluster_objects_installed=0
  write_config
  for c in "${components[@]}"; do
    wanted "$c" || continue
    if pid=$(component_pid "$c"); then
      # A binary rebuilt after the process started (the simulator, mostly) replaces it.
      if [[ $(component_binary "$c") -nt $(pid_file "$c") ]]; then
        say "$c binary changed; restarting it"
        stop "$c"
      elif [[ $c == traefik ]] && ((traefik_config_changed)); then
        say "traefik configuration changed; restarting it"
        stop "$c"
      elif eventually_healthy "$c" 30; then
        say "reusing $c (pid $pid)"
        continue
      else
        # Others may be using it, so it only goes after half a minute of failed checks.
        warn "$c (pid $pid) stayed unhealthy for 30 s; restarting it"
        stop "$c"
      fi
    fi
    for p in $(component_ports "$c"); do
      port_in_use "$p" && die "$c: port $p is already in use (see $(log_file "$c"))"
    done
    # Traefik's informers wait for every CRD they watch.
    [[ $c != traefik ]] || install_cluster_objects
    launch "$c"
  done
  if ((prometheus_config_changed)) && pid=$(component_pid prometheus); then
    curl -fsS -m 5 -X POST "http://127.0.0.1:$prometheus_port/-/reload" >/dev/null || warn "prometheus did not reload its configuration"
  fi
  if ! "$own_bin_dir/stackctl" nodes -kubeconfig "$kubeconfig" -count "$node_count" -timeout 2m; then
    die "kwok: the fake nodes did not become Ready; last lines of $(log_file kwok):
$(tail -n 25 "$(log_file kwok)" | sed 's/^/  /')"
  fi
  install_cluster_objects
  write_env
  say "ready in $((SECONDS - started)) s; use it with: . $stack_dir/env"
}

down() {
  local i
  mkdir -p "$run_dir"
  exec 9>"$run_dir/up.lock"
  flock 9
  etcd_bin=$(command -v etcd || echo /usr/bin/etcd)
  prometheus_bin=$(command -v prometheus || echo /usr/bin/prometheus)
  local -A pids=()
  local pid c
  # Everything gets SIGTERM at once, clients first, so the slowest shutdown sets the pace.
  for ((i = ${#components[@]} - 1; i >= 0; i--)); do
    c=${components[i]}
    pid=$(signal_stop "$c")
    [[ -z $pid ]] || pids[$c]=$pid
  done
  for c in "${!pids[@]}"; do
    wait_stopped "$c" "${pids[$c]}"
  done
  rm -f "$stack_dir/env"
}

status() {
  local c pid
  etcd_bin=$(command -v etcd || echo etcd)
  prometheus_bin=$(command -v prometheus || echo prometheus)
  for c in "${components[@]}"; do
    if pid=$(component_pid "$c"); then
      if healthy "$c"; then echo "$c: running (pid $pid)"; else echo "$c: running but not healthy (pid $pid)"; fi
    else
      echo "$c: stopped"
    fi
  done
}

case ${1:-} in
up) up ;;
down) down ;;
status) status ;;
*) die "usage: $0 up|down|status" ;;
esac
