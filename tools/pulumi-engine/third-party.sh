# Sourced by the build scripts in this folder: where the third-party plugin sources are.
# They live in the workplace's shared/third_party beside the repository (read-only there);
# SPARKRACK_THIRD_PARTY points elsewhere.

third_party_root() {
  local repo
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  echo "${SPARKRACK_THIRD_PARTY:-$repo/../shared/third_party}"
}

# The source folder `name`, or an error that says what it is for and what to install instead.
third_party_dir() {
  local name=$1 what=$2 instead=$3 dir
  dir="$(third_party_root)/$name"
  if [ ! -f "$dir/go.mod" ]; then
    printf '%s: its source %s is not there.\n  Either %s,\n  or set SPARKRACK_THIRD_PARTY to a folder holding %s/.\n' \
      "$what" "$dir" "$instead" "$name" >&2
    exit 1
  fi
  echo "$dir"
}
