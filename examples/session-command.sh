#!/bin/sh
# A starting point for usher vda --session-command, e.g.
#
#   usher vda --broker https://broker:8443 --broker-ca /etc/usher/site-ca.pem \
#     --machine office-vda-01 --enrolment-secret-file /etc/usher/enrolment.secret \
#     --tls-cert /etc/usher/vda.crt --tls-key /etc/usher/vda.key \
#     --session-command "/usr/local/lib/usher/session-command.sh /var/log/usher/sessions.log"
#
# The agent runs it without a shell, with the arguments written after it in
# --session-command (here a log file; default: none) and the session in its
# environment:
#
#   USHER_EVENT         prepare, logoff or disconnect
#   USHER_SESSION_ID    the session's ID
#   USHER_USER          the user's name
#   USHER_RESOURCE      the application or desktop launched
#   USHER_COMMAND_LINE  the application's command line, if any
#
# It has 10 seconds. A non-zero exit at prepare refuses the session (the
# broker tries another machine); at logoff or disconnect it leaves the
# session as it was. What it writes is shown only when it fails.
#
# The session stays pending until the ticket from the launch is presented to
# the agent (POST http://VDA:8490/connect {"ticket":"...","client_name":"..."}),
# by the display protocol's logon hook, a gateway or the client: see
# `usher vda -h`.
set -eu

log=${1:-/dev/null}
: "${USHER_EVENT:?run by usher vda --session-command}" "${USHER_SESSION_ID:?}" "${USHER_USER:?}"

case $USHER_EVENT in
prepare)
	# A session is coming: check that the user may log on here, make the
	# home directory, start what the resource needs. For example:
	#   id "$USHER_USER" >/dev/null 2>&1 || { echo "no such user: $USHER_USER" >&2; exit 1; }
	;;
disconnect)
	# The client went away; the session lives on. Lock the screen, say.
	;;
logoff)
	# The session ends: end the user's processes of this session. For example:
	#   loginctl terminate-session "$(cat "/run/usher/$USHER_SESSION_ID.sid")"
	;;
*)
	echo "unknown USHER_EVENT: $USHER_EVENT" >&2
	exit 1
	;;
esac

printf '%s %s session=%s user=%s resource=%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
	"$USHER_EVENT" "$USHER_SESSION_ID" "$USHER_USER" "${USHER_RESOURCE:-}" >>"$log"
