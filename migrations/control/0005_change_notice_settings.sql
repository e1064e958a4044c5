-- A tenant's change notice settings (toki_core::change::ChangeNoticeSettings)
-- as JSON; NULL means the defaults (off).
ALTER TABLE tenants ADD COLUMN change_notices TEXT;
