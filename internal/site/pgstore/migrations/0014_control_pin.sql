-- The fingerprint of the certificate a VDA's https control listener
-- shows (site.MachineStatus.ControlPin), registered with its control URL
-- and token: brokers send the token only to a listener that shows it.
-- place_session returns it with the rest of the status (after
-- registered_credential, as pgstore's statusCols); an OUT parameter more
-- is a new function, so 0012's is dropped first. It is 0012's otherwise.
ALTER TABLE machine_status ADD COLUMN control_pin text NOT NULL DEFAULT '';

DROP FUNCTION place_session(text, text, text, text, text, text, text, timestamptz, timestamptz, timestamptz,
	boolean, text[], text[], text[], text, text[], text[], bigint[], bigint[], boolean[]);

CREATE FUNCTION place_session(
	p_id text, p_user text, p_resource text, p_group text, p_state text,
	p_client_name text, p_client_address text,
	p_created_at timestamptz, p_updated_at timestamptz, p_ended_at timestamptz,
	p_reconnect boolean, p_groups text[], p_policies text[], p_resources text[], p_client text, p_skip text[],
	p_machines text[], p_limits bigint[], p_loads bigint[], p_assign boolean[],
	-- 'reconnect', 'claimed' or 'refused', and the machine.
	OUT o_kind text, OUT o_machine text,
	-- The machine's status, as pgstore's statusCols.
	OUT o_registration text, OUT o_last_heartbeat timestamptz, OUT o_load_index bigint, OUT o_sessions bigint,
	OUT o_cpu_percent double precision, OUT o_memory_percent double precision, OUT o_logons_in_progress bigint,
	OUT o_memory_used_mb bigint, OUT o_memory_total_mb bigint, OUT o_registered_address text, OUT o_protocol text,
	OUT o_control_url text, OUT o_control_token text, OUT o_agent_version text, OUT o_registration_conflict text,
	OUT o_registration_conflict_at timestamptz, OUT o_registered_credential text, OUT o_control_pin text,
	-- The session to go back to, as pgstore's sessionCols; '' and NULL
	-- in the other kinds of rows.
	OUT o_id text, OUT o_user text, OUT o_resource text, OUT o_group text, OUT o_session_machine text,
	OUT o_state text, OUT o_client_name text, OUT o_client_address text,
	OUT o_created_at timestamptz, OUT o_updated_at timestamptz, OUT o_ended_at timestamptz)
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
	v_machine text;
	v_owner   text;    -- the candidate's assigned user, '' for none
	v_config  boolean; -- take the configuration lock for the candidate
	v_outcome text;    -- 'claim', 'refused', 'gone' or 'retry'
BEGIN
	IF p_reconnect THEN
		-- Lock 1. The class is "ushp"; migrations use "ushr".
		PERFORM pg_advisory_xact_lock(1970497648, hashtext(current_schema() || '/' || p_user));
		SELECT s.id, s.user_name, s.resource, s.delivery_group, s.machine, s.state, s.client_name, s.client_address,
			s.created_at, s.updated_at, s.ended_at,
			st.registration, st.last_heartbeat, st.load_index, st.sessions, st.cpu_percent, st.memory_percent,
			st.logons_in_progress, st.memory_used_mb, st.memory_total_mb, st.registered_address, st.protocol,
			st.control_url, st.control_token, st.agent_version, st.registration_conflict, st.registration_conflict_at,
			st.registered_credential, st.control_pin
		INTO o_id, o_user, o_resource, o_group, o_session_machine, o_state, o_client_name, o_client_address,
			o_created_at, o_updated_at, o_ended_at,
			o_registration, o_last_heartbeat, o_load_index, o_sessions, o_cpu_percent, o_memory_percent,
			o_logons_in_progress, o_memory_used_mb, o_memory_total_mb, o_registered_address, o_protocol,
			o_control_url, o_control_token, o_agent_version, o_registration_conflict, o_registration_conflict_at,
			o_registered_credential, o_control_pin
		FROM sessions s
		JOIN machine_status st ON st.machine = s.machine
		CROSS JOIN LATERAL (SELECT array_position(p_groups, s.delivery_group::text) AS i) g
		WHERE s.user_name = p_user AND s.state <> 'logged-off' AND s.ended_at IS NULL
			AND s.resource = ANY (p_resources) AND s.id <> ALL (p_skip) AND g.i IS NOT NULL
			AND (s.state IN ('pending', 'disconnected')
				OR s.state = 'active' AND (p_policies[g.i] = 'always'
					OR p_policies[g.i] = 'same-endpoint-only' AND p_client <> '' AND s.client_name = p_client))
			AND st.registration = 'registered'
		ORDER BY s.id
		LIMIT 1;
		IF FOUND THEN
			o_kind := 'reconnect';
			o_machine := o_session_machine;
			RETURN NEXT;
			RETURN;
		END IF;
	END IF;

	o_id := ''; o_user := ''; o_resource := ''; o_group := ''; o_session_machine := '';
	o_state := ''; o_client_name := ''; o_client_address := '';
	o_created_at := NULL; o_updated_at := NULL; o_ended_at := NULL;

	FOR i IN 1 .. coalesce(array_length(p_machines, 1), 0) LOOP
		v_machine := p_machines[i];
		-- Lock 2 comes before the machine's rows: whether it is needed is
		-- seen without locking, and checked once they are locked.
		v_config := p_assign[i] AND EXISTS (SELECT 1 FROM machines WHERE name = v_machine AND assigned_user IS NULL);
		<<attempt>>
		LOOP
			BEGIN
				v_outcome := 'claim';
				IF v_config THEN
					PERFORM 1 FROM settings WHERE id = 1 FOR UPDATE;
				END IF;
				PERFORM 1 FROM machines WHERE name = v_machine FOR KEY SHARE;
				IF FOUND THEN
					SELECT registration, last_heartbeat, load_index, sessions, cpu_percent, memory_percent,
						logons_in_progress, memory_used_mb, memory_total_mb, registered_address, protocol,
						control_url, control_token, agent_version, registration_conflict, registration_conflict_at,
						registered_credential, control_pin
					INTO o_registration, o_last_heartbeat, o_load_index, o_sessions, o_cpu_percent, o_memory_percent,
						o_logons_in_progress, o_memory_used_mb, o_memory_total_mb, o_registered_address, o_protocol,
						o_control_url, o_control_token, o_agent_version, o_registration_conflict, o_registration_conflict_at,
						o_registered_credential, o_control_pin
					FROM machine_status WHERE machine = v_machine FOR UPDATE;
				END IF;
				IF NOT FOUND THEN
					v_outcome := 'gone';
				ELSE
					-- The owner as it is once the status is ours: it may
					-- have changed while the placement waited for it.
					SELECT coalesce(assigned_user, '') INTO v_owner FROM machines WHERE name = v_machine;
					IF o_registration <> 'registered'
						OR (p_limits[i] > 0 AND o_sessions >= p_limits[i])
						OR (p_assign[i] AND v_owner <> '' AND v_owner <> p_user) THEN
						v_outcome := 'refused';
					ELSIF p_assign[i] AND v_owner = '' AND NOT v_config THEN
						v_outcome := 'retry'; -- unassigned meanwhile: again, with lock 2 first
					END IF;
				END IF;
				IF v_outcome <> 'claim' THEN
					RAISE SQLSTATE 'UP000'; -- gives this candidate's locks back
				END IF;
			EXCEPTION WHEN SQLSTATE 'UP000' THEN
				NULL;
			END;
			EXIT attempt WHEN v_outcome <> 'retry';
			v_config := true;
		END LOOP;

		CASE v_outcome
		WHEN 'refused' THEN
			o_kind := 'refused';
			o_machine := v_machine;
			RETURN NEXT;
		WHEN 'claim' THEN
			UPDATE machine_status
			SET sessions = sessions + 1, logons_in_progress = logons_in_progress + 1, load_index = p_loads[i]
			WHERE machine = v_machine
			RETURNING registration, last_heartbeat, load_index, sessions, cpu_percent, memory_percent,
				logons_in_progress, memory_used_mb, memory_total_mb, registered_address, protocol,
				control_url, control_token, agent_version, registration_conflict, registration_conflict_at,
				registered_credential, control_pin
			INTO o_registration, o_last_heartbeat, o_load_index, o_sessions, o_cpu_percent, o_memory_percent,
				o_logons_in_progress, o_memory_used_mb, o_memory_total_mb, o_registered_address, o_protocol,
				o_control_url, o_control_token, o_agent_version, o_registration_conflict, o_registration_conflict_at,
				o_registered_credential, o_control_pin;
			IF p_assign[i] AND v_owner = '' THEN
				IF NOT EXISTS (SELECT 1 FROM users WHERE name = p_user) THEN
					RAISE SQLSTATE 'UP004' USING MESSAGE = 'the user to assign the machine to does not exist', DETAIL = v_machine;
				END IF;
				UPDATE machines SET assigned_user = p_user WHERE name = v_machine;
				UPDATE settings SET config_version = config_version + 1 WHERE id = 1;
			END IF;
			IF NOT EXISTS (SELECT 1 FROM resources WHERE name = p_resource) THEN
				RAISE SQLSTATE 'UP002' USING MESSAGE = 'the session''s resource does not exist', DETAIL = v_machine;
			END IF;
			INSERT INTO sessions (id, user_name, resource, delivery_group, machine, state, client_name, client_address,
				created_at, updated_at, ended_at)
			VALUES (p_id, p_user, p_resource, p_group, v_machine, p_state, p_client_name, p_client_address,
				p_created_at, p_updated_at, p_ended_at)
			ON CONFLICT (id) DO NOTHING;
			IF NOT FOUND THEN
				RAISE SQLSTATE 'UP003' USING MESSAGE = 'the session''s ID is taken', DETAIL = v_machine;
			END IF;
			o_kind := 'claimed';
			o_machine := v_machine;
			RETURN NEXT;
			RETURN;
		ELSE
			NULL; -- gone: not reported
		END CASE;
	END LOOP;
	RETURN;
END
$$;
