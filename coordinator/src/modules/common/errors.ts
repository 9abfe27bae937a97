// Domain errors: the few failures a service may report, each with the HTTP status it maps to.
// The one error handler (plugins/errors.ts) turns them into `{success: false, error}`; anything
// else is a bug, logged in full and answered with a generic 500.

export class DomainError extends Error {
  readonly statusCode: number;
  constructor(statusCode: number, message: string) {
    super(message);
    this.name = new.target.name;
    this.statusCode = statusCode;
  }
}

export class BadRequestError extends DomainError {
  constructor(message: string) {
    super(400, message);
  }
}

export class UnauthorizedError extends DomainError {
  constructor(message = 'Authentication required') {
    super(401, message);
  }
}

export class ForbiddenError extends DomainError {
  constructor(message = 'You do not have permission to do this') {
    super(403, message);
  }
}

export class NotFoundError extends DomainError {
  constructor(message: string) {
    super(404, message);
  }
}

export class ConflictError extends DomainError {
  constructor(message: string) {
    super(409, message);
  }
}

/** An upstream service (SMTP, a forge) refused or could not be reached; the message is theirs. */
export class UpstreamError extends DomainError {
  constructor(message: string) {
    super(502, message);
  }
}
