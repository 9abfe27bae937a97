// Every entity the ORM knows, in one list (no folder scanning: what runs is what is imported).
import { Agent } from '../modules/agent/agent.entity.ts';
import { AgentInstall } from '../modules/agent-install/agent-install.entity.ts';
import { AuditEvent } from '../modules/audit/audit-event.entity.ts';
import { Deployment, DeploymentJob, LogChunk, LogEntry } from '../modules/deployment/deployment.entity.ts';
import {
  DeploymentNotice,
  NotificationAttempt,
  NotificationDelivery,
  ProjectHook,
} from '../modules/notification/notification.entity.ts';
import { Project } from '../modules/project/project.entity.ts';
import { RateLimitHit } from '../modules/rate-limit/rate-limit-hit.entity.ts';
import { Setting } from '../modules/settings/setting.entity.ts';
import { ApiToken } from '../modules/token/api-token.entity.ts';
import { Invitation } from '../modules/user/invitation.entity.ts';
import { Session, User } from '../modules/user/user.entity.ts';
import { WebhookDelivery } from '../modules/webhook/webhook-delivery.entity.ts';

export const entities = [
  User,
  Session,
  Project,
  Agent,
  Deployment,
  DeploymentJob,
  LogEntry,
  LogChunk,
  AuditEvent,
  WebhookDelivery,
  ApiToken,
  ProjectHook,
  DeploymentNotice,
  NotificationDelivery,
  NotificationAttempt,
  RateLimitHit,
  Invitation,
  Setting,
  AgentInstall,
];
