"""Action plugin of moe_infra.deepep.deepep_cluster_report: the report is the controller's, so it is written here, in
the controller's own process, with the module's argument spec and code (module_utils' cluster_report_writer).
Nothing goes to a node and no module process starts (a Python start and the module's packaging: the task took
0.64 s of a no-op site.yml on the GPU test machine, docs/results/site-noop-h200/run14). The task's
delegate_to: localhost changes nothing."""

from __future__ import annotations

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from ansible_collections.moe_infra.deepep.plugins.module_utils.report.cluster_report_writer import (
    ARGUMENT_SPEC,
    REQUIRED_ONE_OF,
    ReportError,
    write_report,
)


class ActionModule(ActionBase):

    _supports_check_mode = True
    _supports_async = False
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        validated = ArgumentSpecValidator(ARGUMENT_SPEC, required_one_of=REQUIRED_ONE_OF).validate(self._task.args)
        if validated.error_messages:
            return dict(result, failed=True, msg="; ".join(validated.error_messages))
        try:
            result.update(write_report(validated.validated_parameters, self._play_context.check_mode))
        except ReportError as exc:
            result.update(exc.result, failed=True, msg=str(exc))
        return result
