#!/bin/sh
# The usher multi-zone demo on one machine: a primary zone (hq) with two
# brokers and a satellite zone (branch) with one, sharing one PostgreSQL
# site DB, each zone with its simulated VDAs. See README.md here.
#
#   examples/multizone/run.sh            # start everything; Ctrl-C stops it
#   USHER_DB=postgres://... run.sh       # another PostgreSQL server
#   MULTIZONE_PORTS="9101 9102 9201 9491 9492" run.sh
#                                        # other ports: hq-1, hq-2, branch-1, the two simulators
#
# It needs a built ./usher (go build ./cmd/usher), curl, psql and a
# PostgreSQL server where the DSN's user may create a schema.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
usher=${USHER:-$here/../../usher}
db=${USHER_DB:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
schema=${USHER_SCHEMA:-usher_multizone}
password=${DEMO_PASSWORD:-multizone-demo}
set -- ${MULTIZONE_PORTS:-8101 8102 8201 8491 8492}
hq1=$1 hq2=$2 br1=$3 vhq=$4 vbr=$5
work=$(mktemp -d "${TMPDIR:-/tmp}/usher-multizone.XXXXXX")

[ -x "$usher" ] || { echo "no usher binary at $usher: run 'go build ./cmd/usher' at the top of the tree (or set USHER)" >&2; exit 1; }
case $db in *\?*) site="$db&search_path=$schema" ;; *) site="$db?search_path=$schema" ;; esac

pids=""
stop() {
	trap - EXIT INT TERM
	[ -n "$pids" ] && kill $pids 2>/dev/null || true
	wait 2>/dev/null || true
	echo "stopped; logs were in $work (removed)"
	rm -rf "$work"
}
trap stop EXIT INT TERM

ready() { # URL: wait up to 30 s for /readyz
	i=0
	until curl -fsS -o /dev/null "$1/readyz" 2>/dev/null; do
		i=$((i + 1))
		[ $i -lt 300 ] || { echo "$1 did not get ready; its log is in $work" >&2; exit 1; }
		sleep 0.1
	done
}

echo "site DB: schema $schema of $db (made afresh)"
psql -q "$db" -c "DROP SCHEMA IF EXISTS $schema CASCADE" -c "CREATE SCHEMA $schema"
"$usher" apply -f "$here/site.yaml" --db "$site" >"$work/apply.log"
printf '%s\n' "$password" | "$usher" admin add root --password-stdin --db "$site" >/dev/null

broker() { # NAME ZONE PORT
	"$usher" broker --db "$site" --name "$1" --zone "$2" --listen "127.0.0.1:$3" --data "$work/$1" >"$work/$1.log" 2>&1 &
	pids="$pids $!"
}
broker hq-1 hq "$hq1"
broker hq-2 hq "$hq2"
broker branch-1 branch "$br1"
for port in "$hq1" "$hq2" "$br1"; do ready "http://127.0.0.1:$port"; done

# Demo users' passwords, through the admin API of any broker.
for u in alice bob carol dave erin; do
	curl -fsS -u "root:$password" -X PUT -H 'Content-Type: application/json' \
		-d "{\"password\":\"$password\"}" "http://127.0.0.1:$hq1/api/v1/admin/users/$u/password"
done

# Each zone's VDAs register with their own zone's brokers; the branch's
# fall back to hq's while no branch broker answers.
export USHER_ENROLMENT_SECRET="$(cat "$work/hq-1/enrolment.secret")"
"$usher" vda --simulate all --machine-prefix hq- --listen "127.0.0.1:$vhq" \
	--broker "http://127.0.0.1:$hq1,http://127.0.0.1:$hq2" >"$work/vda-hq.log" 2>&1 &
pids="$pids $!"
"$usher" vda --simulate all --machine-prefix branch- --listen "127.0.0.1:$vbr" \
	--broker "http://127.0.0.1:$br1" --fallback-broker "http://127.0.0.1:$hq1,http://127.0.0.1:$hq2" >"$work/vda-branch.log" 2>&1 &
pids="$pids $!"

cat <<EOT

usher multi-zone demo is running (logs in $work):

  zone hq (primary):     broker hq-1      http://127.0.0.1:$hq1/
                         broker hq-2      http://127.0.0.1:$hq2/
  zone branch:           broker branch-1  http://127.0.0.1:$br1/

  users alice (home hq), bob and dave (home branch), carol and erin (no home zone);
  their password and root's (admin API) is: $password

Try (README.md in examples/multizone has the tour):

  curl -s -u root:$password http://127.0.0.1:$hq1/api/v1/admin/brokers
  $here/launch.sh bob notepad $hq1      # bob's home zone is branch: a branch host, whichever broker
  $here/launch.sh carol notepad $br1    # no home zone: where she is, the branch
  $here/launch.sh bob ledger $br1       # the ledger runs at hq or nowhere

Ctrl-C stops everything.
EOT
wait
