-- The fingerprint of the certificate a VDA's https control listener
-- shows (site.MachineStatus.ControlPin), registered with its control URL
-- and token: brokers send the token only to a listener that shows it.
ALTER TABLE machines ADD COLUMN control_pin TEXT NOT NULL DEFAULT '';
