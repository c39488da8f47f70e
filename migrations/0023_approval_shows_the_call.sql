-- What an approver approves, shown to them: the call's command and arguments.
-- An approval was bound to the call's chain, tool server and args, but not its
-- cmd, so an agent holding a DR for /mcp/tools/call could spend an approval of
-- one call on the same args under any sub-path of that command; and no route,
-- webhook or receipt showed the args an approver was asked to allow. The
-- binding now covers cmd too (computed by the service), and the row keeps both
-- so the approval, its list and its webhook show them. Approvals requested
-- before this migration have neither (NULL), and their bindings, made without
-- cmd, match no new call: those calls ask again.
ALTER TABLE "approvals" ADD COLUMN "cmd" text;--> statement-breakpoint
ALTER TABLE "approvals" ADD COLUMN "args" jsonb;
